"""Each running job's newest step and loss, read from its ``events.jsonl`` as the trainer writes it."""

from __future__ import annotations


from collections.abc import Iterator

from lat_core.contract.jobdir import AnyEvent, EventTail, JobDir, Started, last_progress
from lat_core.contract.journal import Store
from lat_core.contract.rows import JobRow
from lat_core.contract.states import HistoryKind


class Progress:
    def __init__(self, store: Store):
        self.store = store
        self._tails: dict[int, EventTail] = {}  # job id -> where its events.jsonl was read up to
        self._max_steps: dict[int, int | None] = {}  # job id -> its latest attempt's planned steps

    def read(self, job: JobRow) -> tuple[int, float | None] | None:
        """Record the job's newest (step, loss) since the last read; returns it, None when none."""
        if job.id not in self._tails:
            self._tails[job.id] = JobDir(job.job_dir).event_tail()
        tail = self._tails[job.id]
        bad_before = tail.skipped.count
        last = last_progress(self._noting_max_steps(job.id, tail.read()))
        if last is not None:
            self.store.set_progress(job.id, *last)
        skipped = tail.skipped
        if skipped.count > bad_before:  # told once per job, then counted
            detail = f"{skipped.count} bad line(s) skipped; first: {skipped.first}"
            if bad_before == 0 or skipped.count >= 10 * bad_before:
                self.store.add_transition(job.run_id, job.id, HistoryKind.BAD_EVENTS, detail)
        return last

    def max_steps(self, job_id: int) -> int | None:
        """The steps the job's latest attempt planned (its ``started`` event), where it was read."""
        return self._max_steps.get(job_id)

    def _noting_max_steps(self, job_id: int, events: Iterator[AnyEvent]) -> Iterator[AnyEvent]:
        for event in events:
            if isinstance(event, Started):
                self._max_steps[job_id] = event.max_steps
            yield event
