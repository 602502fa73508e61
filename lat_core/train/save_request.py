"""Save and stop when asked: SIGUSR1 (Slurm's ``--signal=B:USR1@<s>`` warning before a time limit,
forwarded by the runner) makes the trainer save a checkpoint at the end of its current step and
stop; ``python -m lat_core.train`` then exits ``EXIT_SAVED_TO_RESUME``, which the engine reads as
"stopped by the time limit, resumable" and resubmits with ``--resume``.

Installed first thing in the trainer's main, before the heavy imports, so that a warning that
comes while the model loads is kept (USR1's default action would end the process) and honoured at
the first step. Torch-free: the callback that acts on it is :mod:`lat_core.train.save_on_signal`.
"""

from __future__ import annotations

import signal
import threading

from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME

__all__ = ["EXIT_SAVED_TO_RESUME", "SavedToResume", "ask", "install", "requested"]

_asked = threading.Event()


class SavedToResume(Exception):
    """Training stopped early after a requested save: the job is to be resumed, not judged."""

    def __init__(self, step: int):
        super().__init__(f"saved a checkpoint at step {step} when asked (SIGUSR1) and stopped, to be resumed")
        self.step = step


def install() -> None:
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: ask())


def ask() -> None:
    """The request, from the signal or, under torchrun, from another rank that got it
    (:mod:`lat_core.train.save_on_signal`): every rank that stops for it exits alike."""
    _asked.set()


def requested() -> bool:
    return _asked.is_set()
