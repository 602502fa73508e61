"""What the results screen shows, computed off the UI thread: tables, curves, sort orders, cells.

Running jobs are folded in by the core (``aggregate_live``): during a run the point of this screen
is to watch evaluations land, so a running job with a checkpointed validation eval shows as a
provisional result, counted apart in the ``n`` column (``2+1``: two finished seeds, one running).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from rich.style import Style
from rich.text import Text

from lat_core.front.client import JobResult, Report, Row, Table, aggregate_live, build_tables
from lat_tui.widgets.curve import Series

BEST_LEGEND = "* best mean of its column (mean±std over seeds; n = seeds, +k still running)"
FIXED_COLUMNS = ("config", "n")


@dataclass(frozen=True)
class Snapshot:
    """One aggregation of the output root, with running jobs folded in provisionally."""

    report: Report
    tables: tuple[Table, ...]
    running: frozenset[Path]
    queued: int = 0  # job folders written but not started: waiting, not skipped

    def table(self, dataset: str | None) -> Table | None:
        return next((t for t in self.tables if t.dataset == dataset), None)

    def jobs(self, dataset: str, config: str) -> list[JobResult]:
        return [r for r in self.report.results if r.dataset == dataset and r.config == config]

    def running_count(self, dataset: str, config: str) -> int:
        return sum(r.job_dir in self.running for r in self.jobs(dataset, config))


def load_snapshot(root: Path) -> Snapshot:
    """Aggregate ``root`` (raises ResultsError when it is not a folder); runs in a worker thread."""
    live = aggregate_live(root)
    return Snapshot(report=live.report, tables=tuple(build_tables(live.report)), running=live.running,
                    queued=live.queued)


# --- sorting --------------------------------------------------------------------------------

def column_keys(table: Table) -> list[str]:
    return [*FIXED_COLUMNS, *(c.key for c in table.columns)]


def column_labels(table: Table) -> list[str]:
    return [*FIXED_COLUMNS, *(c.label for c in table.columns)]


def natural_descending(table: Table, key: str) -> bool:
    """The first direction a column sorts in: best first for metrics, A-Z for names, most seeds first."""
    if key == "config":
        return False
    if key == "n":
        return True
    column = next(c for c in table.columns if c.key == key)
    return column.higher_is_better


def _sort_value(row: Row, key: str):
    if key == "config":
        return row.config
    if key == "n":
        return row.n
    return row.stats[key].mean


def sorted_rows(table: Table, key: str, reverse: bool) -> list[Row]:
    """Rows ordered by ``key`` in its natural direction (flipped by ``reverse``); gaps always last."""
    present = [r for r in table.rows if _sort_value(r, key) is not None]
    missing = [r for r in table.rows if _sort_value(r, key) is None]
    descending = natural_descending(table, key) != reverse
    present.sort(key=lambda r: (_sort_value(r, key), r.config), reverse=descending)
    return present + missing


# --- cells ----------------------------------------------------------------------------------

def stat_text(row: Row, key: str) -> str:
    stat = row.stats.get(key)
    if stat is None or stat.mean is None:
        return "–"
    return f"{stat.mean:.3f}±{stat.std:.3f}" if stat.n > 1 else f"{stat.mean:.3f}"


def metric_cell(row: Row, key: str, best_style: Style) -> Text:
    """A mean±std cell; the best value of its column is styled and starred, so plain text shows it too."""
    if key in row.best:
        return Text(stat_text(row, key) + "*", style=best_style)
    return Text(stat_text(row, key))


def count_cell(row: Row, running: int) -> str:
    return f"{row.n - running}+{running}" if running else str(row.n)


def row_summary(table: Table, row: Row, running: int, compact: bool = False) -> list[str]:
    """Lines describing one row: seeds, best steps and every metric (``compact``: two lines, name first)."""
    metrics = [f"{c.label} {stat_text(row, c.key)}{'*' if c.key in row.best else ''}" for c in table.columns]
    if compact:
        return [f"{row.config} · n={count_cell(row, running)} · {table.dataset}", " · ".join(metrics)]
    lines = [f"{table.dataset} · {count_cell(row, running)} seed(s)",
             f"seeds {', '.join(str(s) for s in row.seeds)}",
             f"best steps {', '.join(str(s) for s in row.best_steps)}"]
    return lines + metrics


# --- curves ---------------------------------------------------------------------------------

def mean_by_step(curves) -> tuple[tuple[int, float], ...]:
    """Seeds' curves combined: the mean of every value logged at each step."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for curve in curves:
        for step, value in curve:
            by_step[step].append(value)
    return tuple((step, statistics.fmean(values)) for step, values in sorted(by_step.items()))


def curve_series(jobs: list[JobResult]) -> list[Series]:
    """Training loss and the main validation metric against steps, averaged over seeds."""
    if not jobs:
        return []
    metric = jobs[0].metric
    return [Series("loss", mean_by_step(j.losses for j in jobs)),
            Series(f"val {metric}", mean_by_step(j.curve for j in jobs))]
