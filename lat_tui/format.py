"""Plain-text formatting shared by the headless front end and ``lat-tui status``."""

from __future__ import annotations

import time

from lat_core.store import JobRow, Transition


def fmt_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


def fmt_loss(loss: float | None) -> str:
    return "-" if loss is None else f"{loss:.4f}"


def progress_line(t: Transition, job: JobRow | None, started: float) -> str:
    stamp = fmt_elapsed(t.ts - started)
    if job is None and t.new_state == "engine error":
        return f"[{stamp}] run {t.run_id}: engine error: {t.detail}"
    if job is None:
        return f"[{stamp}] run {t.run_id}: {t.old_state or '-'} -> {t.new_state}  {t.detail}".rstrip()
    arrow = t.new_state if t.old_state is None else f"{t.old_state} -> {t.new_state}"
    return f"[{stamp}] job {job.id} {job.key}: {arrow}  {t.detail}".rstrip()


COLUMNS = ("id", "job", "state", "device", "elapsed", "step", "loss", "peak rss", "peak gpu", "tries")


def fmt_bytes(n: int | None) -> str:
    if not n:
        return "-"
    for unit, size in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n}B"


def job_table(jobs: list[JobRow], now: float | None = None) -> str:
    now = now or time.time()
    rows = [COLUMNS] + [
        (str(j.id), j.key, j.state, j.device or "-", fmt_elapsed(j.elapsed(now)),
         "-" if j.last_step is None else str(j.last_step), fmt_loss(j.last_loss),
         fmt_bytes(j.peak_rss), fmt_bytes(j.peak_gpu), str(j.attempts))
        for j in jobs
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
