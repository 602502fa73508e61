"""Jobs that wait for others' success (a plan's ``after:``, ``lat-tui --after JOB``), as pueue's
``--after`` and Slurm's ``--dependency=afterok`` do: such a job stays queued, saying which job it
waits for, until every one of its parents has succeeded; a parent that failed or was cancelled
cancels it, with that reason in its history (a requeue of both runs them again, in order).

Every tick, before admission, :meth:`Dependencies.settle` reads the run's queued jobs that wait
(an index of their own: a tick reads these few, not the whole queue), cancels those whose parent
ended otherwise and holds the rest; a parent's failure is final by then, since a retry that
``on_oom`` or ``on_failure`` asks for queues it again in the same reaping pass. A part of
:class:`lat_core.engine.loop.Engine`.
"""

from __future__ import annotations

from lat_core.contract.rows import JobRow, RunRow
from lat_core.contract.states import JobState
from lat_core.engine.state import EngineState

ENDED_OTHERWISE = (JobState.FAILED, JobState.CANCELLED)
MAX_CASCADE = 100  # passes of one settle: a job cancelled cancels those waiting for it in the next pass


class Dependencies:
    def __init__(self, state: EngineState):
        self.store = state.store
        self._clock = state.clock
        self._held: set[int] = set()  # jobs whose parents have not all succeeded, as of the last settle

    def settle(self, run: RunRow) -> None:
        """Cancel the run's waiting jobs whose parent will not succeed, and say what the others wait for."""
        self._held = set()
        for _ in range(MAX_CASCADE):
            if not self._settle_once(run):
                return

    def _settle_once(self, run: RunRow) -> bool:
        """One pass; True when it cancelled a job (others may have waited for it)."""
        waiting = self.store.queued_dependents(run.id)
        parents = self.store.job_states(p for _, after, _ in waiting for p in after)
        cancelled = False
        with self.store.batch():  # one commit for all: a plan's after: may hold back 10,000 jobs at once
            for job_id, after, reason in waiting:
                cancelled = self._settle_job(job_id, after, reason, parents) or cancelled
        return cancelled

    def _settle_job(self, job_id: int, after: tuple[int, ...], reason: str | None,
                    parents: dict[int, tuple[JobState, str]]) -> bool:
        """Cancel the job (True) or hold it, saying why (False)."""
        pending = [p for p in after if parents.get(p, (None, ""))[0] is not JobState.SUCCEEDED]
        doomed = next((p for p in pending if p not in parents or parents[p][0] in ENDED_OTHERWISE), None)
        if doomed is not None:
            self._cancel(job_id, doomed, parents.get(doomed))
            return True
        if pending:
            self._held.add(job_id)
            self._say(job_id, reason, _waiting_for(pending, parents))
        return False

    def hold(self, job: JobRow) -> bool:
        """True while ``job`` waits for a parent (its reason is written): admission passes it by."""
        return job.id in self._held

    def _cancel(self, job_id: int, parent: int, known: tuple[JobState, str] | None) -> None:
        what = f"job {parent} ({known[1]}) {known[0].value}" if known else f"job {parent} is gone from the journal"
        why = f"{what}: this job was to run after its success"
        self.store.set_job_state(job_id, JobState.CANCELLED, why, ended=self._clock(), error=why)

    def _say(self, job_id: int, reason: str | None, wanted: str) -> None:
        if reason != wanted:
            self.store.set_waiting(job_id, wanted)


def _waiting_for(pending: list[int], parents: dict[int, tuple[JobState, str]]) -> str:
    first = pending[0]
    more = f" and {len(pending) - 1} more" if len(pending) > 1 else ""
    return f"waiting for job {first} ({parents[first][1]}) to succeed{more}"
