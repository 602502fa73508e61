"""A signal passed on to processes that are still starting, once each can take it.

Slurm's warning before a time limit (SIGUSR1, ``sbatch --signal=B:USR1@N``) goes to the batch
shell's process, LAT's runner, which must pass it on to its trainer; torchrun's agent must pass it on
to its workers. Slurm may send it up to a minute early, so on a short limit it can come while the
trainer is still starting: killed at once, a Python process that has not yet put its handler in
place dies of it (USR1's default action) instead of saving to be resumed. So the signal is kept,
and given to each target once that target would not die of it (:func:`takes`: a handler, or the
signal blocked or ignored): the trainer then saves at its first step, as it does for a warning that
comes mid-training; srun, which blocks it and waits for it in a thread, passes it on to its tasks.

Torch-free: the runner and LAT's torchrun both use it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

Targets = Callable[[], list[int]]
_HAS_PROC = os.path.exists("/proc/self/status")


class PassOn:
    """A signal handler: the first signal is passed on to each of ``targets()`` once, as soon as that
    process takes it (:func:`takes`); a thread looks every ``every_s`` for targets that can take it. ``said``
    is told of each pass (for the job's log)."""

    def __init__(self, targets: Targets, every_s: float = 0.5, said: Callable[[int, int], None] | None = None):
        self._targets = targets
        self._every_s = every_s
        self._said = said
        self._lock = threading.Lock()
        self.signum: int | None = None
        self.told: set[int] = set()

    def __call__(self, signum: int, _frame: object = None) -> None:
        # only a thread started here: a print from the handler itself could land inside one the main
        # thread is making (a reentrant write to the same stream raises)
        if self.signum is None:
            self.signum = signum
            threading.Thread(target=self._keep_passing, name="lat-pass-on", daemon=True).start()

    def retarget(self, targets: Targets) -> None:
        """Pass on to these from now on (the runner's child once started; none once it is reaped:
        its pid may be a stranger's then)."""
        with self._lock:
            self._targets = targets
        if self.signum is not None:
            self.pass_on()

    def _keep_passing(self) -> None:
        while True:
            self.pass_on()  # at once: a target that listens already hears it now, not a look later
            time.sleep(self._every_s)

    def pass_on(self) -> None:
        with self._lock:
            signum = self.signum
            if signum is None:
                return
            for pid in self._targets():
                if pid in self.told or not takes(pid, signum):
                    continue
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    continue  # ended meanwhile: its parent reaps it
                self.told.add(pid)
                if self._said is not None:
                    self._said(pid, signum)


def takes(pid: int, signum: int) -> bool:
    """Whether the process would not die of the signal: it has a handler for it (``SigCgt`` of its
    /proc status), blocks it to take it in its own time (srun waits for signals in a thread of its
    own: ``SigBlk``), or ignores it (``SigIgn``). True where there is no /proc to tell (passed on at
    once, as before this module)."""
    if not _HAS_PROC:
        return True
    masks = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in ("SigCgt", "SigBlk", "SigIgn"):
                    masks[name] = int(value.strip(), 16)
    except (OSError, ValueError):
        return False
    return any(mask >> (signum - 1) & 1 for mask in masks.values())
