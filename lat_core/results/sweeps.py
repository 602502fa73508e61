"""A sweep's results by its values: per experiment config and dataset, one row per point with the
main metric's mean and spread over seeds, the best point marked.

Which jobs are a sweep's: those whose folder's overrides.json records a point (JobDir.sweep_point),
planned from the same experiment config over the same swept fields. Why rows apart for stage 1: a
screening job trains on a part of the data or a step budget, so its value ranks points within stage
1 and says nothing next to a full run's; it is never in a full row's mean nor the best. A point's
jobs that did not succeed (pruned by the sweep, failed, running) are counted by state beside the
row, never averaged in.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from lat_core.results.accounts import JobAccount
from lat_core.results.metrics import MetricSpec, metric_value, spec_for
from lat_core.results.scan import JobResult, Report
from lat_core.results.tables import Stat, Table, stat_of

SCREEN_STAGE, FULL_STAGE = "screen", "full"


@dataclass(frozen=True)
class SweepRow:
    """One point of a sweep in one stage. ``config``: the point's own config name (its row in the
    dataset's table); ``values``: the main metric of each succeeded job, by seed order; ``planned``:
    the point's jobs in this stage; ``left_out``: (state, count) of those not in the mean."""

    values: tuple[tuple[str, object], ...]
    screen: bool
    config: str
    stat: Stat
    seeds: tuple[int | None, ...]
    scores: tuple[float, ...]
    planned: int
    left_out: tuple[tuple[str, int], ...] = ()
    best: bool = False

    @property
    def stage(self) -> str:
        return SCREEN_STAGE if self.screen else FULL_STAGE

    @property
    def short(self) -> bool:
        return self.stat.n < self.planned

    def value_of(self, field: str) -> object:
        return dict(self.values)[field]

    @property
    def band(self) -> tuple[float, float] | None:
        """The min and max over seeds (None without a value)."""
        return (min(self.scores), max(self.scores)) if self.scores else None


@dataclass(frozen=True)
class SweepTable:
    """The points of one experiment config's sweep on one dataset: full rows first (a one-stage
    sweep's are all full), then stage 1's screening rows, each block in the order of its values."""

    dataset: str
    config: str
    spec: MetricSpec
    fields: tuple[str, ...]
    rows: tuple[SweepRow, ...]

    @property
    def has_screen(self) -> bool:
        return any(row.screen for row in self.rows)

    @property
    def best(self) -> SweepRow | None:
        return next((row for row in self.rows if row.best), None)


PointKey = tuple[tuple[tuple[str, object], ...], bool]  # a point's values, and whether it is stage 1's


@dataclass
class _Point:
    """The jobs of one point and stage, gathered before they become a row."""

    planned: int = 0
    config: str = ""
    results: list[JobResult] = field(default_factory=list)
    left_out: Counter[str] = field(default_factory=Counter)


def build_sweeps(report: Report, tables: Sequence[Table] = ()) -> list[SweepTable]:
    """The sweep tables of every swept config and dataset among ``report``'s accounted jobs, ranked
    by each dataset's main metric as its ``tables`` are (its name's metric without a table)."""
    by_folder = {result.job_dir.resolve(): result for result in report.results}
    sweeps: dict[tuple[str, str, tuple[str, ...]], dict[PointKey, _Point]] = defaultdict(dict)
    for job in report.accounts:
        if job.point is not None:
            key = (job.dataset, job.point.config, job.point.fields)
            point = sweeps[key].setdefault((job.point.values, job.point.screen), _Point())
            _count(point, job, by_folder.get(job.job_dir.resolve()))
    specs = {table.dataset: table.spec for table in tables}
    return [_table(dataset, config, fields, points, specs.get(dataset) or spec_for(dataset))
            for (dataset, config, fields), points in sorted(sweeps.items(), key=lambda item: item[0][:2])]


def _count(point: _Point, job: JobAccount, result: JobResult | None) -> None:
    point.planned += 1
    point.config = point.config or job.config
    if job.in_table and result is not None:
        point.results.append(result)
    else:
        point.left_out[job.state] += 1


def _table(dataset: str, config: str, fields: tuple[str, ...], points: dict[PointKey, _Point],
           spec: MetricSpec) -> SweepTable:
    rows = [_row(values, screen, point, spec) for (values, screen), point in points.items()]
    rows.sort(key=lambda row: (row.screen, [_order(value) for _, value in row.values]))
    return SweepTable(dataset, config, spec, fields, tuple(_mark_best(rows, spec)))


def _row(values: tuple[tuple[str, object], ...], screen: bool, point: _Point, spec: MetricSpec) -> SweepRow:
    results = sorted(point.results, key=lambda r: (r.seed is None, r.seed or 0, str(r.job_dir)))
    scored = [(r.seed, v) for r in results if (v := metric_value(r.validation, spec.main)) is not None]
    left_out = tuple(sorted(point.left_out.items()))
    return SweepRow(values, screen, point.config, stat_of([v for _, v in scored]), tuple(s for s, _ in scored),
                    tuple(v for _, v in scored), point.planned, left_out)


def _mark_best(rows: list[SweepRow], spec: MetricSpec) -> list[SweepRow]:
    """The full row with the best mean (every tied one); stage 1's rows are never the best."""
    means = [row.stat.mean for row in rows if not row.screen and row.stat.mean is not None]
    if not means:
        return rows
    top = max(means) if spec.higher_is_better else min(means)
    return [replace(row, best=True) if not row.screen and row.stat.mean is not None
            and math.isclose(row.stat.mean, top, rel_tol=1e-12, abs_tol=1e-12) else row for row in rows]


def _order(value: object) -> tuple[int, float, str]:
    """Numbers in their order, then anything else by its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))

