"""CSV, JSON and Markdown renderings of the result tables.

Why three: Markdown is read by people (terminal, PR comments), CSV goes to spreadsheets and pandas,
JSON keeps every number and flag for other tools (the TUI's results screen reads it back).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path

from lat_core.results.scan import Report
from lat_core.results.tables import Row, Table
from lat_core.text import fmt_bytes

SKIPPED_SHOWN = 20


def fmt_value(mean: float | None, std: float | None, n: int) -> str:
    """``0.8123 ± 0.0100``; a single seed shows no spread; no value shows an em dash."""
    if mean is None:
        return "—"
    return f"{mean:.4f}" if n <= 1 else f"{mean:.4f} ± {std:.4f}"


def _joined(values: Iterable[object]) -> str:
    return ", ".join("?" if v is None else str(v) for v in values)


def _path_headers(table: Table) -> list[str]:
    return [] if table.small else ["checkpoints", "job configs"]


def _md_cells(table: Table, row: Row) -> list[str]:
    cells = [row.config, str(row.n)]
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
             f"Main metric: `{table.spec.main}` ({direction} is better); best per column in bold.", "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cells(table, row)) + " |" for row in table.rows]
    if table.notes:
        lines += ["", *(f"- {note}" for note in table.notes)]
    return "\n".join(lines) + "\n"


def skipped_markdown(report: Report, limit: int = SKIPPED_SHOWN) -> str:
    """The count of skipped folders and the first ``limit`` with their reasons."""
    if not report.skipped:
        return ""
    lines = [f"### Skipped folders ({len(report.skipped)})", ""]
    for item in report.skipped[:limit]:
        lines.append(f"- `{_relative_text(item.path, report)}`: {item.reason}")
    if len(report.skipped) > limit:
        lines.append(f"- … and {len(report.skipped) - limit} more")
    return "\n".join(lines) + "\n"


def _relative_text(path: Path, report: Report) -> str:
    try:
        return str(path.relative_to(report.root))
    except ValueError:
        return str(path)


def report_markdown(report: Report, tables: list[Table]) -> str:
    """All tables, then the skipped folders."""
    head = (f"# Results: {report.root}\n\n{len(report.results)} job(s) in {len(tables)} dataset(s), "
            f"{len(report.skipped)} folder(s) skipped.\n")
    parts = [head, *(table_markdown(t) for t in tables)]
    if not tables:
        parts.append("No finished job with a usable evaluation.\n")
    parts.append(skipped_markdown(report))
    return "\n".join(p for p in parts if p)


def _csv_header(table: Table) -> list[str]:
    header = ["config", "n", "seeds"]
    for column in table.columns:
        header += [f"{column.key}_mean", f"{column.key}_std", f"{column.key}_n", f"{column.key}_best"]
    header += ["best_steps", "peak_memory_bytes"]
    return header + ([] if table.small else ["checkpoints", "job_configs"])


def _csv_row(table: Table, row: Row) -> list[object]:
    cells: list[object] = [row.config, row.n, _joined(row.seeds).replace(", ", ";")]
    for column in table.columns:
        stat = row.stats[column.key]
        cells += [_num(stat.mean), _num(stat.std), stat.n, "*" if column.key in row.best else ""]
    cells += [";".join(map(str, row.best_steps)), row.peak_memory_bytes or ""]
    if not table.small:
        cells += [";".join(row.checkpoints), ";".join(row.config_paths)]
    return cells


def _num(value: float | None) -> str:
    return "" if value is None else repr(value)


def table_csv(table: Table) -> str:
    """One dataset as CSV; ``<col>_best`` holds ``*`` on the best row(s); lists join with ``;``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(_csv_header(table))
    writer.writerows(_csv_row(table, row) for row in table.rows)
    return buffer.getvalue()


def _row_json(table: Table, row: Row) -> dict[str, object]:
    metrics = {c.key: {"split": c.split, "metric": c.metric, "mean": row.stats[c.key].mean,
                       "std": row.stats[c.key].std, "n": row.stats[c.key].n,
                       "best": c.key in row.best}
               for c in table.columns}
    out: dict[str, object] = {"config": row.config, "n": row.n, "seeds": list(row.seeds), "metrics": metrics,
           "best_steps": list(row.best_steps), "peak_memory_bytes": row.peak_memory_bytes}
    if not table.small:
        out.update(checkpoints=list(row.checkpoints), job_configs=list(row.config_paths))
    return out


def table_json(table: Table) -> dict[str, object]:
    return {"dataset": table.dataset, "main_metric": table.spec.main,
            "higher_is_better": table.spec.higher_is_better,
            "columns": [c.key for c in table.columns],
            "rows": [_row_json(table, row) for row in table.rows], "notes": list(table.notes)}


def report_json(report: Report, tables: list[Table]) -> str:
    """Every table, the skipped folders with reasons and the warnings, as indented JSON."""
    data = {"root": str(report.root), "jobs": len(report.results),
            "datasets": [table_json(t) for t in tables],
            "skipped": [{"path": _relative_text(s.path, report), "reason": s.reason}
                        for s in report.skipped],
            "warnings": report.warnings}
    return json.dumps(data, indent=1, allow_nan=False) + "\n"
