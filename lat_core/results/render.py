"""CSV, JSON and Markdown renderings of the result tables.

Why three: Markdown is read by people (terminal, PR comments), CSV goes to spreadsheets and pandas,
JSON keeps every number and flag for other tools (the TUI's results screen reads it back).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from collections.abc import Iterable
from pathlib import Path

from lat_core.contract.jobdir import SweepPoint
from lat_core.results.accounts import JobAccount
from lat_core.results.scan import Report
from lat_core.results.sweep_render import point_json, stage_json, sweep_json, sweep_markdown, unread_points_markdown
from lat_core.results.sweeps import build_sweeps
from lat_core.results.tables import Row, Table
from lat_core.text import fmt_bytes

SKIPPED_SHOWN = 20
NOTHING_USABLE = "No job succeeded with a usable evaluation"
SCHEMA_VERSION = 1  # of results.json and `results --json` (results.schema.json beside this file)
SHORT_MARK, PARTIAL_MARK = "!", "~"
MARKS = (f"n = jobs that succeeded of those planned; `{SHORT_MARK}` fewer succeeded than planned (the others are "
         f"under Jobs with their reason); `{PARTIAL_MARK}` a partial row: the best so far of jobs that failed or "
         "were cancelled, never in a finished row's mean")


def fmt_value(mean: float | None, std: float | None, n: int) -> str:
    """``0.8123 ± 0.0100``; a single seed shows no spread; no value shows an em dash."""
    if mean is None:
        return "—"
    return f"{mean:.4f}" if n <= 1 else f"{mean:.4f} ± {std:.4f}"


def _joined(values: Iterable[object]) -> str:
    return ", ".join("?" if v is None else str(v) for v in values)


def _path_headers(table: Table) -> list[str]:
    return [] if table.small else ["checkpoints", "job configs"]


def count_text(row: Row) -> str:
    """``2``, ``1 of 2 !`` (fewer succeeded than planned), ``1 ~`` (a partial row's jobs), and on a
    live screen ``1+1 of 3 !`` (one succeeded, one running with a provisional result)."""
    if row.partial:
        return f"{row.n} {PARTIAL_MARK}"
    done = f"{row.succeeded}+{row.running}" if row.running else str(row.n)
    if row.planned is None:
        return done
    return f"{done} of {row.planned}" + (f" {SHORT_MARK}" if row.short else "")


def config_text(row: Row) -> str:
    return f"{row.config} {PARTIAL_MARK}" if row.partial else row.config


def _md_cells(table: Table, row: Row) -> list[str]:
    cells = [config_text(row), count_text(row)]
    for column in table.columns:
        stat = row.stats[column.key]
        text = fmt_value(stat.mean, stat.std, stat.n)
        cells.append(f"**{text}**" if column.key in row.best else text)
    cells += [_joined(row.best_steps), fmt_bytes(row.peak_memory_bytes or None, unknown="—")]
    if not table.small:
        cells += [_joined(row.checkpoints), _joined(row.config_paths)]
    return [c.replace("|", "\\|") for c in cells]


def table_markdown(table: Table) -> str:
    """One dataset as a Markdown table with a heading naming the main metric."""
    direction = "higher" if table.spec.higher_is_better else "lower"
    headers = ["config", "n", *(c.label for c in table.columns), "best step", "peak memory",
               *_path_headers(table)]
    lines = [f"### {table.dataset}", "",
             f"Main metric: `{table.spec.main}` ({direction} is better); best per column in bold; {MARKS}.", "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cells(table, row)) + " |" for row in table.rows]
    if table.notes:
        lines += ["", *(f"- {note}" for note in table.notes)]
    return "\n".join(lines) + "\n"


def skipped_markdown(report: Report, limit: int = SKIPPED_SHOWN) -> str:
    """The count of folders that hold no job (or, unaccounted, no result) and the first ``limit``
    with their reasons."""
    if not report.skipped:
        return ""
    lines = [f"### Skipped folders ({len(report.skipped)})", ""]
    for item in report.skipped[:limit]:
        lines.append(f"- `{_relative_text(item.path, report)}`: {item.reason}")
    if len(report.skipped) > limit:
        lines.append(f"- … and {len(report.skipped) - limit} more")
    return "\n".join(lines) + "\n"


def _job_cells(job: JobAccount, report: Report) -> list[str]:
    value = "—" if job.value is None else f"{job.value:.4f}" + (f" {PARTIAL_MARK}" if not job.in_table else "")
    cells = ["" if job.job_id is None else str(job.job_id), job.name, job.state_text,
             "—" if job.best_step is None else str(job.best_step), value, job.reason, _relative_text(job.job_dir, report)]
    return [c.replace("|", "\\|").replace("\n", " ") for c in cells]


def jobs_markdown(report: Report) -> str:
    """Every job accounted for: its state, best step and main metric, and why it is not in a table."""
    if not report.accounts:
        return ""
    headers = ["job", "name", "state", "best step", "main metric", "not in the tables because", "folder"]
    lines = [f"### Jobs ({len(report.accounts)})", "", "Every job of the runs accounted for; a value marked "
             f"`{PARTIAL_MARK}` is the best so far of a job that did not succeed.", "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_job_cells(job, report)) + " |" for job in _in_order(report.accounts)]
    return "\n".join(lines) + "\n"


def _in_order(accounts: Iterable[JobAccount]) -> list[JobAccount]:
    """Jobs not in the tables first (what needs a look), then by dataset, config and seed."""
    return sorted(accounts, key=lambda j: (j.in_table, j.dataset, j.config, j.seed is None, j.seed or 0))


def not_in_tables(report: Report) -> list[JobAccount]:
    return [job for job in _in_order(report.accounts) if not job.in_table]


def summary_line(report: Report) -> str:
    """``6 job(s) planned in run 3: 4 succeeded, 1 failed, 1 cancelled; 4 in the tables.``"""
    if not report.accounts:
        return f"{len(report.results)} job(s) in the tables."
    states: dict[str, int] = {}
    for job in report.accounts:
        states[job.state] = states.get(job.state, 0) + 1
    runs = f" in run(s) {', '.join(map(str, report.runs))}" if report.runs else ""
    by_state = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    in_tables = sum(job.in_table for job in report.accounts)
    return f"{len(report.accounts)} job(s) planned{runs}: {by_state}; {in_tables} in the tables."


def _relative_text(path: Path, report: Report) -> str:
    try:
        return str(path.relative_to(report.root))
    except ValueError:
        return str(path)


def report_markdown(report: Report, tables: list[Table]) -> str:
    """All tables, then the skipped folders."""
    head = f"# Results: {report.root}\n\n{summary_line(report)}\n"
    parts = [head, *(table_markdown(t) for t in tables)]
    if not report.results:
        parts.append(f"{NOTHING_USABLE}.\n")
    parts += [sweep_markdown(sweep) for sweep in build_sweeps(report, tables)] + [unread_points_markdown(report.accounts)]
    parts += [jobs_markdown(report), skipped_markdown(report)]
    return "\n".join(p for p in parts if p)


def _csv_header(table: Table) -> list[str]:
    header = ["config", "n", "seeds"]
    for column in table.columns:
        header += [f"{column.key}_mean", f"{column.key}_std", f"{column.key}_n", f"{column.key}_best"]
    header += ["best_steps", "peak_memory_bytes"]
    return header + ([] if table.small else ["checkpoints", "job_configs"]) + ["planned", "short", "partial"]


def _csv_row(table: Table, row: Row) -> list[object]:
    cells: list[object] = [row.config, row.n, _joined(row.seeds).replace(", ", ";")]
    for column in table.columns:
        stat = row.stats[column.key]
        cells += [_num(stat.mean), _num(stat.std), stat.n, "*" if column.key in row.best else ""]
    cells += [";".join(map(str, row.best_steps)), row.peak_memory_bytes or ""]
    if not table.small:
        cells += [";".join(row.checkpoints), ";".join(row.config_paths)]
    return cells + ["" if row.planned is None else row.planned, SHORT_MARK if row.short else "",
                    PARTIAL_MARK if row.partial else ""]


def _num(value: float | None) -> str:
    return "" if value is None else repr(value)


def table_csv(table: Table) -> str:
    """One dataset as CSV; ``<col>_best`` holds ``*`` on the best row(s); lists join with ``;``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(_csv_header(table))
    writer.writerows(_csv_row(table, row) for row in table.rows)
    return buffer.getvalue()


def _row_json(table: Table, row: Row, point: SweepPoint | None = None) -> dict[str, object]:
    metrics = {c.key: {"split": c.split, "metric": c.metric, "mean": row.stats[c.key].mean,
                       "std": row.stats[c.key].std, "n": row.stats[c.key].n,
                       "best": c.key in row.best}
               for c in table.columns}
    out: dict[str, object] = {"config": row.config, "partial": row.partial, "n": row.n, "planned": row.planned,
                              "short": row.short, "seeds": list(row.seeds), "metrics": metrics,
                              "best_steps": list(row.best_steps), "peak_memory_bytes": row.peak_memory_bytes,
                              "sweep": point_json(point), "sweep_stage": stage_json(point)}
    if not table.small:
        out.update(checkpoints=list(row.checkpoints), job_configs=list(row.config_paths))
    return out


def table_json(table: Table, points: dict[tuple[str, str], SweepPoint] | None = None) -> dict[str, object]:
    """One dataset's table; ``points``: the sweep point of each (dataset, config) that has one."""
    points = points or {}
    return {"dataset": table.dataset, "main_metric": table.spec.main,
            "higher_is_better": table.spec.higher_is_better,
            "columns": [c.key for c in table.columns],
            "rows": [_row_json(table, row, points.get((table.dataset, row.config))) for row in table.rows],
            "notes": list(table.notes)}


def job_json(job: JobAccount, report: Report) -> dict[str, object]:
    return {"job_id": job.job_id, "run_id": job.run_id, "name": job.name, "config": job.config, "dataset": job.dataset,
            "seed": job.seed, "state": job.state, "in_table": job.in_table, "partial": job.partial,
            "best_step": job.best_step, "value": job.value, "reason": job.reason,
            "stopped_early": asdict(job.stopped_early) if job.stopped_early else None,
            "sweep": point_json(job.point), "sweep_stage": stage_json(job.point),
            "folder": _relative_text(job.job_dir, report)}


def report_document(report: Report, tables: list[Table]) -> dict[str, object]:
    """What results.json and ``results --json`` hold (results.schema.json describes it)."""
    points = {(job.dataset, job.config): job.point for job in report.accounts if job.point is not None}
    return {"schema_version": SCHEMA_VERSION, "root": str(report.root), "runs": list(report.runs),
            "summary": summary_line(report), "jobs_in_tables": len(report.results),
            "datasets": [table_json(t, points) for t in tables],
            "sweeps": [sweep_json(sweep) for sweep in build_sweeps(report, tables)],
            "jobs": [job_json(job, report) for job in _in_order(report.accounts)],
            "skipped": [{"path": _relative_text(s.path, report), "reason": s.reason} for s in report.skipped],
            "warnings": report.warnings}


def report_json(report: Report, tables: list[Table]) -> str:
    """The report as indented JSON (``report_document``)."""
    return json.dumps(report_document(report, tables), indent=1, allow_nan=False) + "\n"
