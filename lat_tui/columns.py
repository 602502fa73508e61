"""The job table's columns, shared by the TUI's job table and the plain-text tables (``status``,
the headless summary): a column is added here once and shows up in both."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from lat_core.rows import JobRow
from lat_core.text import fmt_bytes
from lat_tui import fmt


@dataclass(frozen=True)
class Column:
    key: str  # the TUI's column key (stable: cells are updated by it)
    header: str
    width: int  # in the TUI; plain text sizes columns to their content
    cell: Callable[[JobRow, float], str]  # (job, now) -> text; "" when unknown


def state_text(state) -> str:
    """A job or run state as its plain value, whether the core hands a str or a str-valued Enum."""
    return str(getattr(state, "value", state))


def usage_cells(job: JobRow) -> tuple[str, str]:
    """Host RSS and GPU memory: the latest sample while the job runs, its peak once it ended."""
    rss, gpu = (job.rss, job.gpu_mem) if job.state == "running" else (job.peak_rss, job.peak_gpu)
    # a CPU job's 0 bytes of GPU memory is noise
    return fmt_bytes(rss, compact=True), fmt_bytes(gpu or None, compact=True)


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


def plain_table(jobs: list[JobRow], now: float | None = None) -> str:
    """The job table as aligned text; an unknown value shows as "-" so no column reads empty."""
    now = now or time.time()
    rows = [tuple(c.header for c in JOB_COLUMNS)]
    rows += [tuple(c.cell(j, now) or "-" for c in JOB_COLUMNS) for j in jobs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(JOB_COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
