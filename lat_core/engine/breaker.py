"""The circuit breaker: when a run's first K ended jobs all failed with the same systemic class
(the hub, the data, the config, an import, no GPU: ``systemic`` in lat_core.contract.failure_classes), the
engine pauses the run's admission, says why once (the run's history, every queued job's waiting
reason, a ``paused`` notice), and a person resumes (``lat-tui resume``) or cancels it.

Why: such a failure hits every job alike, and an evening of 100 jobs on an offline node was 40
minutes of identical failures. K is the plan's ``breaker`` (default 3, 0: off). Jobs that ended
by success, another class or a transient one (a retry that ``on_failure`` queued again has not
ended) make the first K mixed, and the breaker stays closed for the run. It trips at most once per
run: after a resume the user has seen the reason and chose to go on. A part of
:class:`lat_core.engine.loop.Engine`.
"""

from __future__ import annotations

from lat_core.contract.rows import JobRow, RunRow
from lat_core.contract.failure_classes import SYSTEMIC_CLASSES, FailureClass
from lat_core.contract.states import HistoryKind, JobState
from lat_core.engine.notices import RunNotices
from lat_core.engine.state import EngineState
from lat_core.text import shorten
from lat_core.titles import job_title

REASON_PREFIX = "breaker: "
ENDED = (JobState.SUCCEEDED, JobState.FAILED)


class Breaker:
    def __init__(self, state: EngineState, notices: RunNotices):
        self.store = state.store
        self._state = state
        self._notices = notices
        self._decided: set[int] = set()  # runs whose first K ended jobs are known: never checked again

    def after_failure(self, run: RunRow, job: JobRow) -> None:
        """A job of ``run`` ended failed: trip the breaker when it makes the run's first K ended
        jobs K failures of one systemic class."""
        if run.id in self._decided or self.store.job(job.id).state is not JobState.FAILED:
            return  # a retry queued it again: not an end yet
        limit = self._limit(run.id)
        first = self._first_ended(run.id, limit) if limit else []
        if len(first) < limit:
            return
        self._decided.add(run.id)
        cls = common_systemic_class(first)
        if cls is None or self._tripped_before(run.id):
            return
        reason = trip_reason(cls, first)
        self.store.set_paused(run.id, True, reason)
        self._notices.run_paused(self.store.run(run.id), reason)

    def _limit(self, run_id: int) -> int:
        """The plan's ``breaker`` (a run saved before the breaker existed has none: off)."""
        return max(0, self._state.plan_of(run_id).breaker)

    def _first_ended(self, run_id: int, limit: int) -> list[JobRow]:
        ended = [j for j in self.store.jobs(run_id) if j.state in ENDED and j.ended is not None]
        return sorted(ended, key=lambda j: j.ended or 0.0)[:limit]

    def _tripped_before(self, run_id: int) -> bool:
        """An engine restarted after the trip (and maybe a resume) must not trip it again."""
        return any(t.new_state == HistoryKind.PAUSED and t.detail.startswith(REASON_PREFIX)
                   for t in self.store.transitions(run_id) if t.job_id is None)


def failure_class(job: JobRow) -> FailureClass | None:
    return job.diagnosis.cls if job.diagnosis and job.state is JobState.FAILED else None


def common_systemic_class(jobs: list[JobRow]) -> FailureClass | None:
    """The one systemic class every job failed with, or None."""
    classes = {failure_class(j) for j in jobs}
    cls = classes.pop() if len(classes) == 1 else None
    return cls if cls in SYSTEMIC_CLASSES else None


def trip_reason(cls: FailureClass, first: list[JobRow]) -> str:
    """The pause's reason, which every queued job shows as what it waits for."""
    latest = first[-1]
    error = shorten(latest.error.splitlines()[0], 200) if latest.error else cls.info.meaning
    return (f"{REASON_PREFIX}the first {len(first)} jobs all failed with {cls.value} (latest: job {latest.id} "
            f"{job_title(latest)}: {error}); fix the cause, then `lat-tui resume`, or `lat-tui cancel --all`")
