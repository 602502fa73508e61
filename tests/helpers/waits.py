"""How long a test waits on real processes (engines, trainers, monitors) before it calls them hung.

Tests wait for the event they mean (a state in the journal, a file, a line on a pipe), never for a
time; this limit only catches a hang, so it is far above any honest wait: under 4x CPU load (8
burners on 2 cores) a warm-start test run that takes 22 s alone took 116 s. A developer chasing a
hang may shorten it: ``LAT_TEST_HANG_S=60 python -m pytest ...``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

HANG_S = float(os.environ.get("LAT_TEST_HANG_S", "600"))
Found = TypeVar("Found")


def wait_until(predicate: Callable[[], Found], what: str, *, timeout: float = HANG_S, every: float = 0.1,
               explain: Callable[[], str] | None = None) -> Found:
    """Return what ``predicate()`` found once it is true; fail naming ``what`` after ``timeout`` seconds,
    with ``explain()``'s account of where things stood (a hang seen once in CI is then readable)."""
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {what} after {timeout:.0f} s (a hang?)" + (f"\n{explain()}" if explain else ""))
        time.sleep(every)
    return found
