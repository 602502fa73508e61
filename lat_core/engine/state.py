"""What the engine's parts share: the journal, the clock, each run's plan and backend, and the
processes of the attempts this engine launched.

Declared once, here: each part of the engine (recovery, fused groups, starts, ...) takes this state
and the other parts it calls in its constructor, so what a part uses is written where it is made,
and no part reaches into another's attributes.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Callable

from lat_core.contract.jobdir import PidRecord
from lat_core.contract.journal import Store
from lat_core.contract.rows import JobRow
from lat_core.contract.saved_plan import SavedPlan
from lat_core.engine.backends import Backend, get_backend


@dataclass
class EngineState:
    store: Store
    clock: Callable[[], float]
    default_backend: Backend  # a run's backend unless its plan names another (tests inject one for every run)
    # attempt id -> its runner's Popen, only to reap our own children
    popens: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    # attempt id -> its runner's pid record, once written (what a warm-started job inherited)
    pid_records: dict[int, PidRecord] = field(default_factory=dict)
    _plans: dict[int, SavedPlan] = field(default_factory=dict, init=False, repr=False)
    _backends: dict[int, Backend] = field(default_factory=dict, init=False, repr=False)

    def plan_of(self, run_id: int) -> SavedPlan:
        """The run's saved plan (read once per run)."""
        if run_id not in self._plans:
            self._plans[run_id] = self.store.run(run_id).plan
        return self._plans[run_id]

    def backend(self, run_id: int) -> Backend:
        """The run's backend (plan field ``backend``)."""
        if run_id not in self._backends:
            self._backends[run_id] = self.default_backend
            plan = self.plan_of(run_id)
            if plan.backend != "local":
                self._backends[run_id] = get_backend(plan.backend, **plan.slurm)
        return self._backends[run_id]

    def job_backend(self, job: JobRow) -> Backend:
        """The run's backend, with this job's own options (a remedy's Slurm time/mem) where it has them."""
        backend = self.backend(job.run_id)
        return backend.with_options(job.backend_options) if job.backend_options else backend

    def forget_process(self, attempt_id: int) -> None:
        """An ended attempt: nothing more to reap or sample of its process."""
        self.popens.pop(attempt_id, None)
        self.pid_records.pop(attempt_id, None)
