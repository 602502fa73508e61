"""Where a trainer's start-up went: a job alone's and a fused group's (each member's ``started``
event carries its group's), so a slow first step names its cause (imports, data, model, ...)."""
from __future__ import annotations

import time


class SetupPhases:
    """Where a job's start-up went, in seconds: the interpreter and imports before :func:`run`
    (from the process's start), then each set-up phase. Logged and in the ``started`` event, so a
    slow start names its cause (imports, model build, data, ...)."""

    def __init__(self, t0: float):
        self._last = t0
        self.phases = {"imports": round(t0 - _process_start(), 2)}

    def lap(self, name: str) -> None:
        now = time.time()
        self.phases[name] = round(now - self._last, 2)
        self._last = now

    def __str__(self) -> str:
        laps = ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items() if k != "imports")
        return f"{sum(v for k, v in self.phases.items() if k != 'imports'):.1f}s ({laps}) after {self.phases['imports']:.1f}s of imports"


def _process_start() -> float:
    import psutil

    return psutil.Process().create_time()
