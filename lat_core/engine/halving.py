"""Successive halving over a sweep's points (``sweep: {halving: {eta: 3, min_steps: 20}}``, see
:mod:`lat_core.front.sweep_halving`): ASHA's rule, made deterministic.

The jobs of one config, dataset, seed and stage race (their role's ``race``). At each rung (a step
count: ``min_steps``, then ``eta`` times as many, ...) a job's score is its best validation value of
the dataset's main metric up to its first eval at or after the rung (:mod:`lat_core.results.metrics`
says which metric and whether higher is better). ASHA stops a job at a rung when it is not in the
top 1/eta of the jobs that reached that rung *so far*, which depends on which finished first. Here
"so far" is "earlier in the sweep": a job is judged at a rung against the points before it in the
sweep's order, once each of them has reached that rung or ended, and goes on if it is among the
best ceil(m / eta) of those m points (itself included; a tie goes to the earlier point). The first
point always goes on; the same metrics stop the same points, whatever the machine's speed. A job is
never held for its judgement: it trains on meanwhile, and a job that ends first is not stopped.

A stopped job ends ``pruned``, its reason in its row, its history and its folder (which results
name), and is not requeued with the failed ones. A part of :class:`lat_core.engine.loop.Engine`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from lat_core.contract.jobdir import Eval, EventTail, JobDir
from lat_core.contract.rows import JobRow, RunRow, SweptJob
from lat_core.contract.states import JobState
from lat_core.engine.state import EngineState
from lat_core.results.metrics import MetricSpec, metric_value, spec_for


@dataclass
class Curve:
    """A job's validation values of its main metric, by step, read as its trainer writes them."""
    tail: EventTail
    values: dict[int, float] = field(default_factory=dict)

    def update(self, metric: str) -> None:
        for event in self.tail.read():
            if isinstance(event, Eval) and event.split == "validation":
                value = metric_value(dict(event.metrics), metric)
                if value is not None:
                    self.values[event.step] = value

    def at(self, rung: int, spec: MetricSpec) -> float | None:
        """The best value up to its first eval at or after ``rung``; None before it got there."""
        reached = [s for s in self.values if s >= rung]
        if not reached:
            return None
        upto = [v for s, v in self.values.items() if s <= min(reached)]
        return max(upto) if spec.higher_is_better else min(upto)


class Halving:
    def __init__(self, state: EngineState, stop: Callable[[JobRow, str], None]):
        self.store = state.store
        self._stop = stop
        self._curves: dict[int, Curve] = {}
        self._races: dict[int, dict[str, list[SweptJob]]] = {}  # run id -> race -> its jobs in point order
        self._stopped: set[int] = set()

    def settle(self, run: RunRow) -> None:
        """Judge the run's racing jobs at the rungs they reached; stop those behind."""
        racing: dict[str, list[JobRow]] = {}
        for job in self.store.running_jobs(run.id):
            if job.sweep is not None and job.sweep.race and job.id not in self._stopped:
                racing.setdefault(job.sweep.race, []).append(job)
        for race, jobs in racing.items():
            rivals = self._race(run.id, race, jobs)
            spec = spec_for(jobs[0].dataset)
            for rival in rivals:  # every rival's new evals once a tick, then each running job judged
                self._curve(rival.id, rival.job_dir).update(spec.main)
            verdicts = Verdicts(rivals, self._curves, self.store.job_states(r.id for r in rivals), spec)
            for job in jobs:
                self._judge(job, rivals, verdicts)

    def _race(self, run_id: int, race: str, running: list[JobRow]) -> list[SweptJob]:
        """The jobs of a race in point order (read once per run; again when a running one is not
        among them: jobs added since)."""
        known = {j.id for j in self._races.get(run_id, {}).get(race, [])}
        if run_id not in self._races or any(j.id not in known for j in running):
            races: dict[str, list[SweptJob]] = {}
            for swept in self.store.swept_jobs(run_id):
                races.setdefault(swept.role.race, []).append(swept)
            self._races[run_id] = races
        return sorted(self._races[run_id].get(race, []), key=lambda j: j.role.point)

    def _curve(self, job_id: int, job_dir: str) -> Curve:
        if job_id not in self._curves:
            self._curves[job_id] = Curve(EventTail(JobDir(job_dir).events_path))
        return self._curves[job_id]

    def _judge(self, job: JobRow, race: list[SweptJob], verdicts: Verdicts) -> None:
        """Stop ``job`` at the first rung where it is behind, if it has reached one."""
        role = job.sweep
        assert role is not None
        place = next(i for i, r in enumerate(race) if r.id == job.id)
        for number in range(len(role.rungs)):
            verdict = verdicts.at(place, number)
            if verdict.stop:
                self._stopped.add(job.id)
                self._stop(job, verdict.why)
                return
            if not verdict.goes_on:
                return


@dataclass(frozen=True)
class Verdict:
    kind: str  # go (among the best: it races at the next rung), stop (behind), pending or out
    why: str = ""  # why it stops

    @property
    def goes_on(self) -> bool:
        return self.kind == "go"

    @property
    def stop(self) -> bool:
        return self.kind == "stop"


GO = Verdict("go")
PENDING = Verdict("pending")  # not judged: it, or an earlier point, has not reached the rung yet
OUT = Verdict("out")  # it does not race at the rung: stopped at an earlier one, or ended before it


class Verdicts:
    """Each job's verdict at each rung, from the curves alone, so an engine restarted later, or one
    that saw the evals in another order, judges the same. A point races at a rung once it went on
    at the one before; a point stopped at a rung never races at a later one, even where its trainer
    logged evals past it before its stop landed."""

    def __init__(self, race: list[SweptJob], curves: dict[int, Curve], states: dict[int, tuple[JobState, str]],
                 spec: MetricSpec):
        self._race, self._curves, self._spec = race, curves, spec
        self._final = {job.id: states.get(job.id, (JobState.FAILED, ""))[0].final for job in race}
        self._memo: dict[tuple[int, int], Verdict] = {}

    def at(self, place: int, number: int) -> Verdict:
        """The verdict of the race's ``place``-th point at its ``number``-th rung (from 0)."""
        if (place, number) not in self._memo:
            self._memo[place, number] = self._judge(place, number)
        return self._memo[place, number]

    def _judge(self, place: int, number: int) -> Verdict:
        job = self._race[place]
        if number > 0 and not self.at(place, number - 1).goes_on:
            return PENDING if self.at(place, number - 1) == PENDING else OUT
        rung = job.role.rungs[number]
        score = self._curves[job.id].at(rung, self._spec)
        if score is None:
            return OUT if self._final[job.id] else PENDING
        rivals = []
        for earlier in range(place):
            before = self.at(earlier, number - 1) if number > 0 else GO
            value = self._curves[self._race[earlier].id].at(rung, self._spec)
            if before == PENDING or (before.goes_on and value is None and not self._final[self._race[earlier].id]):
                return PENDING  # an earlier point may still race at this rung
            if before.goes_on and value is not None:
                rivals.append((self._race[earlier].role.point_name, value))
        better = [(name, v) for name, v in rivals if not self._spec.better(score, v)]  # a tie: the earlier point
        keep = math.ceil((len(rivals) + 1) / job.role.eta)
        if len(better) < keep:
            return GO
        return Verdict("stop", _why(job.role.point_name, number + 1, rung, score, better, len(rivals) + 1,
                                           keep, self._spec))


def _why(name: str, number: int, rung: int, score: float, better: list[tuple[str, float]], points: int,
         keep: int, spec: MetricSpec) -> str:
    best = max(better, key=lambda b: b[1]) if spec.higher_is_better else min(better, key=lambda b: b[1])
    return (f"stopped by the sweep's halving at rung {number} (step {rung}): {name} {spec.main} {score:.4g} "
            f"was behind {len(better)} of the {points - 1} earlier points racing there (the best {best[0]} "
            f"{best[1]:.4g}); the best {keep} of {points} go on")

