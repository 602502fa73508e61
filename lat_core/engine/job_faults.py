"""What the engine does when it cannot handle one job: that job fails with the reason, and a full
disk fails the job that hit it as such and pauses its run's admission once (see
:mod:`lat_core.engine.faults` for the guards that catch these)."""

from __future__ import annotations

import signal
from typing import Any

from lat_core.contract.rows import RunRow
from lat_core.contract.states import JobState
from lat_core.engine.closing import close_log
from lat_core.engine.faults import disk_full_failure, disk_full_pause
from lat_core.engine.groups import FusedGroups
from lat_core.engine.state import EngineState


class JobFaults:
    def __init__(self, state: EngineState, groups: FusedGroups):
        self.store = state.store
        self._clock = state.clock
        self._state = state
        self._groups = groups

    def fail_job(self, job_id: int, reason: str, **fields: Any) -> None:
        """Fail one job for something the engine could not handle about it; its process (if any)
        is stopped, since nothing would watch it any more. ``fields``: more of the job's columns."""
        job = self.store.job(job_id)
        attempts = [a for a in self.store.open_attempts(job.run_id) if a.job_id == job_id]
        for attempt in attempts:
            backend = self._state.backend(job.run_id)
            if attempt.pid and backend.is_alive(attempt.pid, attempt.pid_start) \
                    and not self._groups.cancel_member(job, attempt):  # a fused member leaves; the others go on
                backend.signal(attempt.pid, signal.SIGKILL)
            self.store.finish_attempt(attempt.id, None, JobState.FAILED, reason, ended=self._clock(), error=reason,
                                      **fields)
        if not attempts and not job.state.final:
            self.store.set_job_state(job_id, JobState.FAILED, reason, ended=self._clock(), error=reason, **fields)
        if attempts:  # its log ends saying why the engine stopped it
            close_log(job, "failed", reason, self._clock())

    def disk_full(self, job_id: int, exc: OSError) -> None:
        """The engine could not write a job's files: the disk is full. That job fails as such (no
        engine error, requeueable at once) and the run admits nothing more until the user resumes."""
        run = self.store.run(self.store.job(job_id).run_id)
        error, diagnosis = disk_full_failure(exc, run.output_root)
        self.fail_job(job_id, error, diagnosis=diagnosis)
        self.pause_for_full_disk(run)

    def pause_for_full_disk(self, run: RunRow) -> None:
        """Every job started next would fail the same way within seconds: one pause, one reason."""
        if not self.store.run(run.id).paused:
            self.store.set_paused(run.id, True, disk_full_pause(run.output_root))
