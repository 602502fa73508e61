"""Plain-text formatting shared by the headless front end and ``lat-tui status`` (the job table
itself: :mod:`lat_tui.columns`)."""

from __future__ import annotations

from lat_core.contract.rows import JobRow, Transition
from lat_core.contract.states import HistoryKind


def fmt_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


def fmt_loss(loss: float | None) -> str:
    return "-" if loss is None else f"{loss:.4f}"


def progress_line(t: Transition, job: JobRow | None, started: float, name: str) -> str:
    """One history entry; a job is named ``name``, the job table's name for it."""
    stamp = fmt_elapsed(t.ts - started)
    if job is None and t.new_state == HistoryKind.ENGINE_ERROR:
        return f"[{stamp}] run {t.run_id}: engine error: {t.detail}"
    if job is None:
        return f"[{stamp}] run {t.run_id}: {t.old_state or '-'} -> {t.new_state}  {t.detail}".rstrip()
    arrow = t.new_state if t.old_state is None else f"{t.old_state} -> {t.new_state}"
    return f"[{stamp}] job {job.id} {name}: {arrow}  {t.detail}".rstrip()
