"""Results aggregation: scan an output tree, pick each job's best checkpoint, account for every job
of the runs asked for, write tables and plots.

    report = aggregate("runs", workers=8, jobs=client.jobs(run.id), runs=[run.id])
    paths = write_report(report, "runs/_results", formats={"csv", "json", "md", "png"}, small=False)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from lat_core.contract.rows import JobSummary
from lat_core.results.accounts import JobAccount, account_for

from lat_core.results.metrics import MetricSpec, dataset_key, spec_for
from lat_core.results.plots import safe_name, write_plots
from lat_core.results.render import report_json, report_markdown, table_csv
from lat_core.results.scan import JobResult, Report, ResultsError, Skipped, scan_job, scan_tree
from lat_core.results.sweep_render import sweep_csv
from lat_core.results.sweep_plots import sweep_stem, write_sweep_plots
from lat_core.results.sweeps import SweepTable, build_sweeps
from lat_core.results.tables import Table, build_tables

FORMATS = frozenset({"csv", "json", "md", "png"})

__all__ = [
    "FORMATS", "JobAccount", "JobResult", "MetricSpec", "Report", "ResultsError", "Skipped", "SweepTable", "Table",
    "aggregate", "build_sweeps", "build_tables", "check_formats", "dataset_key", "scan_job", "spec_for", "write_report",
]


def aggregate(root: Path | str, workers: int | None = None, *, jobs: Sequence[JobSummary] = (),
              runs: Sequence[int] = (), strays: bool = True, include_partial: bool = False) -> Report:
    """Scan every job folder under ``root`` (``workers`` threads when > 1) into a Report that
    accounts for every job: the journal's ``jobs`` of ``runs`` in their states and, with
    ``strays``, the job folders under ``root`` that none of them names (see accounts.account_for)."""
    return account_for(scan_tree(root, workers=workers), jobs, runs=runs, strays=strays,
                       include_partial=include_partial)


def check_formats(formats: Iterable[str]) -> set[str]:
    """The formats asked for, lower-cased; a name outside FORMATS raises ResultsError."""
    chosen = {f.strip().lower() for f in formats if f.strip()}
    unknown = chosen - FORMATS
    if unknown:
        raise ResultsError(f"unknown format(s) {', '.join(sorted(unknown))}; "
                           f"choose from {', '.join(sorted(FORMATS))}", where="formats")
    return chosen


def _write(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def write_report(report: Report, out_dir: Path | str, formats: Iterable[str] = FORMATS,
                 small: bool = False) -> list[Path]:
    """Write results.md, results.json, one CSV per dataset and the PNG plots (and per sweep its CSV
    and PNG: ``<dataset>_<config>_sweep``); returns the paths.

    ``small`` leaves out checkpoint and job config paths (for sharing a table outside the server).
    """
    chosen = check_formats(formats)
    out = Path(out_dir).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(f"cannot create output folder: {exc}", where=str(out)) from exc
    tables = build_tables(report, small=small)
    sweeps = build_sweeps(report, tables)
    written: list[Path] = []
    if "md" in chosen:
        written.append(_write(out / "results.md", report_markdown(report, tables)))
    if "json" in chosen:
        written.append(_write(out / "results.json", report_json(report, tables)))
    if "csv" in chosen:
        written += [_write(out / f"results_{safe_name(t.dataset)}.csv", table_csv(t)) for t in tables]
        written += [_write(out / f"{sweep_stem(s)}.csv", sweep_csv(s)) for s in sweeps]
    if "png" in chosen:
        written += write_plots(report, tables, out) + write_sweep_plots(sweeps, out)
    return written

