"""Say which tests hold the run up: the suite's progress line moves only when a test ends, so a few
long ones (a real trainer under load, the local Slurm cluster's first start) once held it at 26%
for 13 minutes with nothing said. Every ``EVERY_S`` this prints the tests that have run longer than
``LONG_S``, each with its worker and how long so far; tests/conftest.py feeds it pytest's start and
end of each test (under pytest-xdist the controller sees every worker's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

LONG_S = 120.0
EVERY_S = 60.0


class LongTests:
    def __init__(self, write: Callable[[str], None], *, clock: Callable[[], float] = time.monotonic):
        self._write, self._clock = write, clock
        self._running: dict[str, float] = {}  # node id -> when it started
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def started(self, nodeid: str) -> None:
        with self._lock:
            self._running[nodeid] = self._clock()

    def ended(self, nodeid: str) -> None:
        with self._lock:
            self._running.pop(nodeid, None)

    def report(self) -> str | None:
        """One line naming the tests running past LONG_S, longest first, or None."""
        now = self._clock()
        with self._lock:
            long = sorted(((now - t, n) for n, t in self._running.items() if now - t > LONG_S), reverse=True)
        if not long:
            return None
        return "still running: " + "; ".join(f"{nodeid} ({seconds / 60:.0f} min)" for seconds, nodeid in long)

    def watch(self) -> None:
        """Print :meth:`report` every EVERY_S from a daemon thread until :meth:`close`."""
        def loop() -> None:
            while not self._stop.wait(EVERY_S):
                line = self.report()
                if line:
                    self._write(line)
        threading.Thread(target=loop, name="long-tests", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
