"""A two-stage search's promotion (``sweep: {stages: {screen: ..., promote: k}}``, see
:mod:`lat_core.front.sweep_stages`): the stage-2 jobs of a search are in the queue from the start,
held; once every stage-1 job of their search has ended, in any state (a failed one ranks last, it
does not stop stage 2), the points are ranked by their stage-1 job's best validation value of the
dataset's main metric (:mod:`lat_core.results.metrics`: which metric, and whether higher is
better), and in one transaction the ``promote`` best points' jobs are released and the others
pruned, with the ranking and its scores in the run's history.

Every tick, before admission, :meth:`Promotion.settle` reads the run's held jobs (an index of their
own). The decision is taken once: the released jobs are no longer held, and the pruned ones are
ended, so an engine restarted later never ranks a search again. A part of
:class:`lat_core.engine.loop.Engine`.
"""

from __future__ import annotations

from dataclasses import dataclass

from lat_core.contract.jobdir import Eval, JobDir
from lat_core.contract.rows import JobRow, RunRow, SweptJob
from lat_core.contract.states import HistoryKind, JobState
from lat_core.contract.sweep_roles import Stage
from lat_core.engine.state import EngineState
from lat_core.results.best import scored_steps
from lat_core.results.metrics import MetricSpec, spec_for
from lat_core.text import shorten

SHOWN_POINTS = 12  # points the run's history names per side of a ranking; the rest are counted


@dataclass(frozen=True)
class Scored:
    """A point's stage-1 result: its best validation value (None: failed, or no eval of the metric)."""
    job: SweptJob
    value: float | None

    def text(self, metric: str) -> str:
        said = f"{metric} {self.value:.4g}" if self.value is not None else f"{self.job.state.value}, no {metric}"
        return f"{self.job.role.point_name} ({said})"


class Promotion:
    def __init__(self, state: EngineState):
        self.store = state.store
        self._clock = state.clock
        self._held: set[int] = set()  # jobs still held for their search's stage 1, as of the last settle

    def settle(self, run: RunRow) -> None:
        """Rank each search whose stage 1 has ended and promote its best; hold the others' stage 2."""
        held = self.store.held_jobs(run.id)
        self._held = set()
        if not held:
            return
        counts = self.store.screening_counts(run.id)
        swept: list[SweptJob] | None = None  # every role of the run: read only when a search is ranked
        for search in dict.fromkeys(h[1] for h in held):
            waiting = [(job_id, reason) for job_id, s, reason in held if s == search]
            unended, total = counts.get(search, (0, 0))
            if unended:
                self._hold(waiting, f"waiting for stage 1 of its sweep: {unended} of {total} screening jobs "
                                    "still to end")
                continue
            swept = self.store.swept_jobs(run.id) if swept is None else swept
            screen = [j for j in swept if j.role.search == search and j.role.stage is Stage.SCREEN]
            self._promote(run, search, screen, [j for j in swept if j.id in {w for w, _ in waiting}])

    def hold(self, job: JobRow) -> bool:
        """True while ``job`` waits for its search's stage 1 (its reason is written): admission passes it by."""
        return job.id in self._held

    def _hold(self, waiting: list[tuple[int, str | None]], reason: str) -> None:
        with self.store.batch():
            for job_id, said in waiting:
                self._held.add(job_id)
                if said != reason:
                    self.store.set_waiting(job_id, reason)

    def _promote(self, run: RunRow, search: str, screen: list[SweptJob], full: list[SweptJob]) -> None:
        """Release the promoted points' stage-2 jobs and prune the others, in one transaction."""
        spec = spec_for(full[0].dataset)
        if not screen:  # none planned (a search of jobs added by hand): nothing to rank them by
            self.store.release([j.id for j in full], "stage 1 of its sweep has no job: not ranked")
            return
        ranked = rank([Scored(j, best_value(j, spec)) for j in screen], spec)
        promote = full[0].role.promote
        chosen = {s.job.role.point for s in ranked[:promote]}
        summary = _summary(search, ranked, promote, spec.main)
        with self.store.batch():
            self.store.add_transition(run.id, None, HistoryKind.SWEEP, summary)
            released = [j.id for j in full if j.role.point in chosen]
            self.store.release(released, f"promoted by stage 1 of its sweep: {_place(ranked, chosen, spec.main)}")
            for job in full:
                if job.role.point not in chosen:
                    self._prune(job, ranked, promote, spec.main)

    def _prune(self, job: SweptJob, ranked: list[Scored], promote: int, metric: str) -> None:
        place = next((i for i, s in enumerate(ranked) if s.job.role.point == job.role.point), None)
        own = f"{ranked[place].text(metric)} ranked {place + 1} of {len(ranked)}" if place is not None \
            else f"{job.role.point_name} has no stage-1 job"
        why = (f"not promoted by stage 1 of its sweep: {own}; the {promote} best went on "
               f"(the last of them {ranked[min(promote, len(ranked)) - 1].text(metric)})")
        self.store.set_job_state(job.id, JobState.PRUNED, why, ended=self._clock(), error=why, held=None)
        try:
            JobDir(job.job_dir).write_pruned(why)
        except OSError:  # a folder gone or read-only: the journal says it
            pass


def best_value(job: SweptJob, spec: MetricSpec) -> float | None:
    """The job's best validation value of ``spec``'s metric; None for a job that failed or was
    cancelled (one the sweep's halving stopped ranks by what it reached)."""
    if job.state not in (JobState.SUCCEEDED, JobState.PRUNED):
        return None
    evals = [e for e in JobDir(job.job_dir).read_events().of(Eval) if isinstance(e, Eval) and e.split == "validation"]
    values = [v for _, v in scored_steps({e.step: dict(e.metrics) for e in evals}, spec.main)]
    if not values:
        return None
    return max(values) if spec.higher_is_better else min(values)


def rank(scored: list[Scored], spec: MetricSpec) -> list[Scored]:
    """Best first; no value ranks last; a tie goes to the earlier point of the sweep."""
    sign = 1.0 if spec.higher_is_better else -1.0
    return sorted(scored, key=lambda s: (s.value is None, -sign * (s.value or 0.0), s.job.role.point))


def _place(ranked: list[Scored], chosen: set[int], metric: str) -> str:
    shown = ", ".join(f"{i + 1}. {s.text(metric)}" for i, s in enumerate(ranked) if s.job.role.point in chosen)
    return f"{shown} of {len(ranked)} points"


def _summary(search: str, ranked: list[Scored], promote: int, metric: str) -> str:
    """``stage 1 of demo/1/tiny_lora/tiny-sst2 ended: promoted lr1e-3 (accuracy 0.74), ...; not ...``."""
    def listed(part: list[Scored]) -> str:
        more = f" and {len(part) - SHOWN_POINTS} more" if len(part) > SHOWN_POINTS else ""
        return ", ".join(s.text(metric) for s in part[:SHOWN_POINTS]) + more
    text = (f"stage 1 of {search} ended, ranked by the best validation {metric}: promoted "
            f"{listed(ranked[:promote])}; not promoted {listed(ranked[promote:])}")
    return shorten(text, 4000)
