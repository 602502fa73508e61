"""The job table's columns, shared by the TUI's job table and the plain-text tables (``status``,
the headless summary): a column is added here once and shows up in both."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from lat_core.rows import JobSummary
from lat_tui import fmt


@dataclass(frozen=True)
class Column:
    key: str  # the TUI's column key (stable: cells are updated by it)
    header: str
    width: int  # in the TUI; plain text sizes columns to their content
    cell: Callable[[JobSummary, float], str]  # (job, now) -> text; "" when unknown


def state_text(state) -> str:
    """A job or run state as its plain value, whether the core hands a str or a str-valued Enum."""
    return str(getattr(state, "value", state))


def usage_cells(job: JobSummary) -> tuple[str, str]:
    """Host RSS and GPU memory: the latest sample while the job runs, its peak once it ended."""
    rss, gpu = (job.rss, job.gpu_mem) if job.state == "running" else (job.peak_rss, job.peak_gpu)
    return fmt.size(rss), fmt.size(gpu or None)  # a CPU job's 0 bytes of GPU memory is noise


JOB_COLUMNS: tuple[Column, ...] = (
    Column("id", "id", 4, lambda j, now: str(j.id)),
    Column("key", "job", 30, lambda j, now: j.key),
    Column("state", "state", 9, lambda j, now: state_text(j.state)),
    Column("device", "dev", 4, lambda j, now: j.device or ""),
    Column("elapsed", "time", 7, lambda j, now: fmt.clock(j.elapsed(now))),
    Column("step", "step", 5, lambda j, now: fmt.step(j.last_step)),
    Column("loss", "loss", 6, lambda j, now: fmt.loss(j.last_loss)),
    Column("rss", "rss", 4, lambda j, now: usage_cells(j)[0]),
    Column("gpu", "gpu", 4, lambda j, now: usage_cells(j)[1]),
    Column("attempts", "try", 3, lambda j, now: str(j.attempts)),
)


def plain_table(jobs: list[JobSummary], now: float | None = None) -> str:
    """The job table as aligned text; an unknown value shows as "-" so no column reads empty.

    Built a column at a time with one format string per line: ``status`` of a 10,000-job run
    prints within its half-second budget."""
    now = now or time.time()
    columns = [[c.header] + [c.cell(j, now) or "-" for j in jobs] for c in JOB_COLUMNS]
    widths = [max(map(len, column)) for column in columns]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(line.format(*row).rstrip() for row in zip(*columns))
