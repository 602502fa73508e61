"""A sweep table as Markdown, CSV and JSON, and a job's sweep values as JSON columns.

The values are written as the sweep's folders name them (``2e-4``, lat_core.text.value_text) for
people, as numbers in CSV and JSON for tools.
"""

from __future__ import annotations

import csv
import io

from lat_core.contract.jobdir import SweepPoint
from lat_core.results.accounts import JobAccount
from lat_core.results.sweeps import SweepRow, SweepTable
from lat_core.text import value_text

SWEEP_MARKS = ("n = jobs of the point that succeeded of those planned (`!` fewer; the others, by state, under "
               "\"not in the mean\"); the best full point in bold; a `screen` row is stage 1 of a two-stage search "
               "(a part of the data or a step budget): ranked apart, never averaged with full runs nor the best")


def sweep_title(table: SweepTable) -> str:
    return f"Sweep of {table.config} on {table.dataset}"


def point_count_text(row: SweepRow) -> str:
    """``2 of 3 !``: jobs of the point in the mean, of those planned."""
    return f"{row.stat.n} of {row.planned}" + (" !" if row.short else "")


def point_mean_text(row: SweepRow) -> str:
    stat = row.stat
    if stat.mean is None:
        return "—"
    return f"{stat.mean:.4f}" if stat.n <= 1 else f"{stat.mean:.4f} ± {stat.std:.4f}"


def left_out_text(row: SweepRow) -> str:
    """``2 pruned, 1 failed``: the point's jobs not in its mean, by state."""
    return ", ".join(f"{count} {state}" for state, count in row.left_out)


def best_line(table: SweepTable) -> str:
    best = table.best
    if best is None:
        return "No full point has a value yet."
    values = " ".join(f"{field}={value_text(value)}" for field, value in best.values)
    return f"Best: {values}: {table.spec.main} {point_mean_text(best)} ({point_count_text(best)})."


def _headers(table: SweepTable) -> list[str]:
    stage = ["stage"] if table.has_screen else []
    return [*table.fields, *stage, "n", table.spec.main, "seeds", "not in the mean"]


def _cells(table: SweepTable, row: SweepRow) -> list[str]:
    stage = [row.stage] if table.has_screen else []
    mean = f"**{point_mean_text(row)}**" if row.best else point_mean_text(row)
    seeds = ", ".join("?" if s is None else str(s) for s in row.seeds)
    cells = [*(value_text(value) for _, value in row.values), *stage, point_count_text(row), mean, seeds, left_out_text(row)]
    return [c.replace("|", "\\|") for c in cells]


def sweep_markdown(table: SweepTable) -> str:
    """One sweep as a Markdown table under a heading, with the best point said in a line."""
    direction = "higher" if table.spec.higher_is_better else "lower"
    headers = _headers(table)
    lines = [f"### {sweep_title(table)}", "",
             f"Main metric: `{table.spec.main}` ({direction} is better), mean ± std over seeds; {SWEEP_MARKS}.", "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cells(table, row)) + " |" for row in table.rows]
    return "\n".join([*lines, "", best_line(table)]) + "\n"


def _plain(value: object) -> object:
    """A value for CSV and JSON: a swept list as a list, anything else as it is."""
    return list(value) if isinstance(value, tuple) else value


def _num(value: float | None) -> str:
    return "" if value is None else repr(value)


def sweep_csv(table: SweepTable) -> str:
    """One sweep as CSV: a column per swept field, then stage, counts, mean, std, min, max, best."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*table.fields, "stage", "n", "planned", f"{table.spec.main}_mean", f"{table.spec.main}_std",
                     f"{table.spec.main}_min", f"{table.spec.main}_max", "best", "seeds", "config", "not_in_mean"])
    for row in table.rows:
        low, high = row.band or (None, None)
        values = [";".join(map(value_text, v)) if isinstance(v, tuple) else v for _, v in row.values]
        writer.writerow([*values, row.stage, row.stat.n, row.planned, _num(row.stat.mean), _num(row.stat.std),
                         _num(low), _num(high), "*" if row.best else "",
                         ";".join("?" if s is None else str(s) for s in row.seeds), row.config,
                         ";".join(f"{state}={count}" for state, count in row.left_out)])
    return buffer.getvalue()


def point_json(point: SweepPoint | None) -> dict[str, object] | None:
    """A job's or a row's sweep values as JSON columns: ``{"train.lr": 0.0002, "peft.r": 16}``."""
    return None if point is None else {field: _plain(value) for field, value in point.values}


def stage_json(point: SweepPoint | None) -> str | None:
    return None if point is None else ("screen" if point.screen else "full")


def _row_json(row: SweepRow) -> dict[str, object]:
    low, high = row.band or (None, None)
    return {"values": {field: _plain(value) for field, value in row.values}, "stage": row.stage,
            "config": row.config, "n": row.stat.n, "planned": row.planned, "mean": row.stat.mean,
            "std": row.stat.std, "min": low, "max": high, "seeds": list(row.seeds), "best": row.best,
            "not_in_mean": dict(row.left_out)}


def sweep_json(table: SweepTable) -> dict[str, object]:
    return {"dataset": table.dataset, "config": table.config, "main_metric": table.spec.main,
            "higher_is_better": table.spec.higher_is_better, "fields": list(table.fields),
            "rows": [_row_json(row) for row in table.rows]}


def unread_points_markdown(accounts: tuple[JobAccount, ...]) -> str:
    """The jobs whose overrides.json could not say their sweep point (a hand-edited or foreign
    file): in the other tables, in no sweep table, and why."""
    unread = [job for job in accounts if job.point_problem]
    if not unread:
        return ""
    lines = [f"### Left out of the sweep tables ({len(unread)})", ""]
    lines += [f"- `{job.job_dir}`: {job.point_problem}" for job in unread]
    return "\n".join(lines) + "\n"
