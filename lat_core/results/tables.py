"""Per-dataset tables: one row per config, seeds combined as mean, sample std and count.

Why seeds are combined and not listed: fine-tuning results on small GLUE tasks swing by points from
seed to seed; a mean with its spread and n is what a comparison between configs can rest on.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lat_core.results.metrics import ABSENT_BECAUSE, Metrics, MetricSpec, metric_value, ranked_by, spec_for
from lat_core.results.scan import JobResult, Report

SPLIT_PREFIX = {"validation": "val", "test": "test"}


@dataclass(frozen=True)
class Column:
    """One metric on one split; ``key`` names it in CSV and JSON (``val_mcc``, ``test_f1``)."""

    split: str
    metric: str
    higher_is_better: bool = True

    @property
    def key(self) -> str:
        return f"{SPLIT_PREFIX.get(self.split, self.split)}_{self.metric}"

    @property
    def label(self) -> str:
        return self.metric if self.split == "validation" else f"{self.split} {self.metric}"


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation (0 for one value) over ``n`` seeds; None when n == 0."""

    mean: float | None
    std: float | None
    n: int


@dataclass(frozen=True)
class Row:
    """One config on one dataset. ``n``: its jobs in the row (succeeded ones, and on a live screen
    ``running`` ones with a provisional best so far; a partial row's: the failed or cancelled ones
    with a best so far); ``planned``: the config's jobs on the dataset in the runs accounted for
    (None: not known)."""

    config: str
    n: int
    seeds: tuple[int | None, ...]
    stats: dict[str, Stat]  # by Column.key
    best: frozenset[str]  # the Column.keys where this row holds the best mean
    best_steps: tuple[int, ...]
    peak_memory_bytes: int | None
    checkpoints: tuple[str, ...] = ()
    config_paths: tuple[str, ...] = ()
    planned: int | None = None
    partial: bool = False  # best-so-far metrics of jobs that did not succeed (--include-partial)
    running: int = 0  # of ``n``: running jobs' provisional results (results.live)

    @property
    def succeeded(self) -> int:
        return self.n - self.running

    @property
    def short(self) -> bool:
        """Fewer jobs succeeded than were planned (a finished row; the ``!`` mark)."""
        return not self.partial and self.planned is not None and self.succeeded < self.planned


@dataclass(frozen=True)
class Table:
    dataset: str
    spec: MetricSpec
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    small: bool = False
    notes: tuple[str, ...] = ()   # why a metric the dataset should report is missing (ABSENT_BECAUSE)


def stat_of(values: list[float]) -> Stat:
    """Mean, sample std (0.0 for a single value) and count."""
    if not values:
        return Stat(None, None, 0)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return Stat(statistics.fmean(values), std, len(values))


def _metrics_on(result: JobResult, split: str) -> Metrics:
    return (result.validation if split == "validation" else result.test) or {}


def columns_for(results: list[JobResult], spec: MetricSpec) -> tuple[Column, ...]:
    """Main validation metric always; companions and test metrics only where some job reports them."""
    columns = [Column("validation", spec.main, spec.higher_is_better)]
    for split in ("validation", "test"):
        for metric in spec.shown:
            column = Column(split, metric, spec.higher_is_better)
            if column in columns:
                continue
            if any(metric_value(_metrics_on(r, split), metric) is not None for r in results):
                columns.append(column)
    return tuple(columns)


def peak_memory(result: JobResult) -> int | None:
    """Peak GPU bytes, or peak RSS where the job used no GPU (CPU runs report 0)."""
    return result.peak_gpu_bytes or result.peak_rss_bytes or None


def _relative(path: Path | None, root: Path) -> str:
    if path is None:
        return ""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _row(config: str, group: list[JobResult], columns: Sequence[Column], root: Path, small: bool,
         planned: int | None = None, partial: bool = False) -> Row:
    """A finished row's results that are marked partial are running jobs' provisional ones (only a
    live report puts such results among the finished: results.live); a partial row's are all partial."""
    group = sorted(group, key=lambda r: (r.seed is None, r.seed or 0, str(r.job_dir)))
    stats = {c.key: stat_of([v for r in group
                             if (v := metric_value(_metrics_on(r, c.split), c.metric)) is not None])
             for c in columns}
    memories = [m for r in group if (m := peak_memory(r)) is not None]
    return Row(config=config, n=len(group), seeds=tuple(r.seed for r in group), stats=stats,
               best=frozenset(), best_steps=tuple(r.best_step for r in group),
               peak_memory_bytes=max(memories) if memories else None,
               checkpoints=() if small else tuple(_relative(r.checkpoint, root) for r in group),
               config_paths=() if small else tuple(_relative(r.config_path, root) for r in group),
               planned=planned, partial=partial, running=0 if partial else sum(r.partial for r in group))


def _best_keys(rows: list[Row], column: Column) -> set[int]:
    """Indexes of the finished rows holding the best mean of ``column`` (every tied row)."""
    means = [(i, m) for i, row in enumerate(rows)
             if not row.partial and (m := row.stats[column.key].mean) is not None]
    if not means:
        return set()
    pick = max if column.higher_is_better else min
    top = pick(m for _, m in means)
    return {i for i, m in means if abs(m - top) <= 1e-12 * max(1.0, abs(top))}


def _mark_best(rows: list[Row], columns: Sequence[Column]) -> list[Row]:
    marks: dict[int, set[str]] = defaultdict(set)
    for column in columns:
        for i in _best_keys(rows, column):
            marks[i].add(column.key)
    return [replace(row, best=frozenset(marks[i])) for i, row in enumerate(rows)]


def _rank_key(row: Row, main: Column) -> tuple[int, int, float, str]:
    """Finished rows best first, then partial rows best first; rows without a value last."""
    mean = row.stats[main.key].mean
    if mean is None:
        return (2, int(row.partial), 0.0, row.config)
    return (int(row.partial), 0, -mean if main.higher_is_better else mean, row.config)


def absent_notes(spec: MetricSpec, results: list[JobResult]) -> tuple[str, ...]:
    """``meteor: missing for 2 of 4 job(s): needs WordNet ...`` for each validation metric of the
    spec that some job lacks and whose absence has a known cause."""
    notes = []
    for metric in spec.shown:
        reason = ABSENT_BECAUSE.get(metric)
        lacking = sum(metric_value(_metrics_on(r, "validation"), metric) is None for r in results)
        if reason and lacking:
            notes.append(f"{metric}: missing for {lacking} of {len(results)} job(s): {reason}")
    return tuple(notes)


def _by_config(results: Sequence[JobResult]) -> dict[str, list[JobResult]]:
    groups: dict[str, list[JobResult]] = defaultdict(list)
    for result in results:
        groups[result.config].append(result)
    return groups


def table_spec(dataset: str, results: Sequence[JobResult]) -> MetricSpec:
    """The dataset's spec, by the task its jobs' trainer named where one did (a CoLA-like dataset
    of any name ranks by MCC), else by the dataset's name; ranked by the metric, in the direction,
    its jobs were ranked by (a user's ``data.metric``)."""
    task = next((r.task for r in results if r.task), None)
    spec = spec_for(dataset, task)
    first = results[0] if results else None
    return ranked_by(spec, first.metric, first.higher_is_better) if first else spec


def build_table(dataset: str, results: list[JobResult], root: Path, small: bool = False,
                planned: dict[str, int] | None = None, partial: Sequence[JobResult] = ()) -> Table:
    """One dataset's table: finished rows ranked best first by the main validation metric, a row
    for each config planned that has none, then the partial rows. ``planned``: jobs per config."""
    spec = table_spec(dataset, [*results, *partial])
    columns = columns_for([*results, *partial], spec)
    groups = _by_config(results)
    counts = planned or {}
    rows = [_row(config, groups.get(config, []), columns, root, small, counts.get(config) if planned else None)
            for config in sorted(set(groups) | set(counts))]
    rows += [_row(config, group, columns, root, small, counts.get(config), partial=True)
             for config, group in _by_config(partial).items()]
    rows.sort(key=lambda r: _rank_key(r, columns[0]))
    return Table(dataset=dataset, spec=spec, columns=columns, rows=tuple(_mark_best(rows, columns)),
                 small=small, notes=absent_notes(spec, results))


def planned_counts(report: Report) -> dict[str, dict[str, int]]:
    """dataset -> config -> jobs planned, from the report's accounts."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in report.accounts:
        counts[job.dataset][job.config] += 1
    return counts


def build_tables(report: Report, small: bool = False) -> list[Table]:
    """One table per dataset (every dataset a job of the report was planned on), in name order."""
    by_dataset: dict[str, list[JobResult]] = defaultdict(list)
    for result in report.results:
        by_dataset[result.dataset].append(result)
    partial: dict[str, list[JobResult]] = defaultdict(list)
    for result in report.partial:
        partial[result.dataset].append(result)
    planned = planned_counts(report) if report.accounts else {}
    names = sorted(set(by_dataset) | set(planned) | set(partial))
    return [build_table(name, by_dataset[name], report.root, small, dict(planned[name]) if planned else None,
                        partial[name]) for name in names]
