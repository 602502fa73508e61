"""What the results screen shows, computed off the UI thread: tables, curves, sort orders, cells.

The screen accounts for every job as ``lat-tui results`` does (the core's ``aggregate_live``, through
the client's ``live_results`` when the screen has the journal), so its counts and the report's agree:
``1 of 3 !`` is one job succeeded of three planned, the others listed with their reason under ``k``.
During a run the point of this screen is to watch evaluations land, so a running job with a
checkpointed validation eval shows its best so far provisionally, counted apart (``1+1 of 3``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.style import Style
from rich.text import Text

from lat_core.front.client import (Client, JobResult, LiveReport, Report, Row, SweepTable, Table, aggregate_live,
                                   build_sweeps, build_tables, count_text, left_out_text, point_count_text, seed_band,
                                   value_text)
from lat_tui.widgets.curve import Series

# one line at 80 columns: the marks of the n column are README's "Results" section's, shortened
BEST_LEGEND = "* best mean±std of seeds · n: succeeded (+running) of planned · ! fewer: k"
SWEEP_LEGEND = "* best full point · n: succeeded of planned · screen: stage 1, apart"
FIXED_COLUMNS = ("config", "n")


@dataclass(frozen=True)
class Snapshot:
    """One aggregation of the output root: every job accounted for, running jobs folded in."""

    live: LiveReport
    tables: tuple[Table, ...]
    sweeps: tuple[SweepTable, ...] = ()

    @property
    def report(self) -> Report:
        return self.live.report

    @property
    def running(self) -> frozenset[Path]:
        return self.live.running

    @property
    def queued(self) -> int:
        return self.live.queued

    def table(self, dataset: str | None) -> Table | None:
        return next((t for t in self.tables if t.dataset == dataset), None)

    def sweeps_of(self, dataset: str | None) -> list[SweepTable]:
        return [sweep for sweep in self.sweeps if sweep.dataset == dataset]

    def jobs(self, dataset: str, config: str) -> list[JobResult]:
        return [r for r in self.report.results if r.dataset == dataset and r.config == config]

    def left_out_lines(self) -> list[str]:
        """Each job in no table with its state and reason, then each folder that holds no job."""
        root = self.report.root
        jobs = [f"{_job_name(job)} · {job.state}: {job.reason}" for job in self.live.left_out()]
        return jobs + [f"{_relative(s.path, root)}: {s.reason}" for s in self.report.skipped]


def _job_name(job) -> str:
    seed = "?" if job.seed is None else job.seed
    number = f"job {job.job_id} " if job.job_id is not None else ""
    return f"{number}{job.config} {seed}:{job.dataset}"


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def load_snapshot(root: Path, client: Client | None = None) -> Snapshot:
    """Aggregate ``root`` (raises ResultsError when it is not a folder); runs in a worker thread.
    With ``client``, the jobs of the runs writing under ``root`` are accounted for in their journal
    states; without, the folders alone say which jobs there are."""
    live = client.live_results(root) if client is not None else aggregate_live(root)
    tables = build_tables(live.report)
    return Snapshot(live=live, tables=tuple(tables), sweeps=tuple(build_sweeps(live.report, tables)))


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

def mean_text(stat) -> str:
    """``0.500±0.141`` over seeds, ``0.700`` for one, ``–`` for none."""
    if stat is None or stat.mean is None:
        return "–"
    return f"{stat.mean:.3f}±{stat.std:.3f}" if stat.n > 1 else f"{stat.mean:.3f}"


def stat_text(row: Row, key: str) -> str:
    return mean_text(row.stats.get(key))


def metric_cell(row: Row, key: str, best_style: Style) -> Text:
    """A mean±std cell; the best value of its column is styled and starred, so plain text shows it too."""
    if key in row.best:
        return Text(stat_text(row, key) + "*", style=best_style)
    return Text(stat_text(row, key))


def count_cell(row: Row) -> str:
    """The ``n`` column as the report writes it (``1 of 3 !``), with running jobs (``1+1 of 3``)."""
    return count_text(row)


def row_summary(table: Table, row: Row, compact: bool = False) -> list[str]:
    """Lines describing one row: seeds, best steps and every metric (``compact``: two lines, name first)."""
    metrics = [f"{c.label} {stat_text(row, c.key)}{'*' if c.key in row.best else ''}" for c in table.columns]
    if compact:
        return [f"{row.config} · n={count_cell(row)} · {table.dataset}", " · ".join(metrics)]
    lines = [table.dataset, f"n {count_cell(row)}",
             f"seeds {', '.join(str(s) for s in row.seeds)}",
             f"best steps {', '.join(str(s) for s in row.best_steps)}"]
    return lines + metrics


# --- a sweep's points -----------------------------------------------------------------------

def sweep_labels(sweeps: list[SweepTable]) -> list[str]:
    """The sweep view's columns for a dataset's sweeps: the swept config, each field any of them
    sweeps, the stage where one has stage 1, then the count, the main metric and the rest."""
    fields = list(dict.fromkeys(field for sweep in sweeps for field in sweep.fields))
    stage = ["stage"] if any(sweep.has_screen for sweep in sweeps) else []
    metric = sweeps[0].spec.main if sweeps else "metric"
    return ["sweep", *fields, *stage, "n", metric, "not in the mean"]


def sweep_cells(sweep: SweepTable, row, labels: list[str], best_style: Style) -> list:
    """One point's cells under ``labels`` (sweep_labels): its values as its folder names them, a
    blank where its sweep does not set a field; the best full point styled and starred."""
    mean = mean_text(row.stat)
    by_label = {"sweep": sweep.config, "stage": row.stage, "n": point_count_text(row),
                sweep.spec.main: Text(mean + "*", style=best_style) if row.best else Text(mean),
                "not in the mean": left_out_text(row)}
    values = dict(row.values)
    return [by_label[label] if label in by_label else value_text(values[label]) if label in values else ""
            for label in labels]


# --- curves ---------------------------------------------------------------------------------

def band_series(name: str, curves) -> Series:
    """Seeds' curves as one series: their mean at each step, and their min-max as its band where
    seeds differ (the core's seed_band, which the PNG plots draw too)."""
    band = seed_band(list(curves))
    spread = any(hi > lo for lo, hi in zip(band.low, band.high))
    return Series(name, tuple(zip(band.steps, band.mean)),
                  tuple(zip(band.steps, band.low, band.high)) if spread else ())


def curve_series(jobs: list[JobResult]) -> list[Series]:
    """Training loss and the main validation metric against steps: mean over seeds, min-max band."""
    if not jobs:
        return []
    metric = jobs[0].metric
    return [band_series("loss", [j.losses for j in jobs]), band_series(f"val {metric}", [j.curve for j in jobs])]
