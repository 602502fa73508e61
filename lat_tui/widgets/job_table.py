"""The job table: one row per job, updated in place so the cursor and scroll stay put."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import DataTable

from lat_core.store import JobRow
from lat_tui import fmt

COLUMNS = (("job", "key", 30), ("state", "state", 9), ("dev", "device", 4), ("time", "elapsed", 7),
           ("step", "step", 5), ("loss", "loss", 6), ("try", "attempts", 3))

STATE_COLORS = {"running": "accent", "succeeded": "success", "failed": "error", "cancelled": "warning"}


class JobTable(DataTable):
    """Rows are keyed by job id; ``show_jobs`` adds new rows and rewrites only changed cells."""

    def __init__(self, **kwargs):
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[int, tuple] = {}

    def on_mount(self) -> None:
        for label, key, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def clear_jobs(self) -> None:
        self.clear()
        self._cells.clear()

    def show_jobs(self, jobs: list[JobRow]) -> None:
        now = time.time()
        for job in jobs:
            cells = self._cells_for(job, now)
            if job.id not in self._cells:
                self.add_row(*cells, key=str(job.id))
            else:
                self._update_row(job.id, cells)
            self._cells[job.id] = cells

    def selected_job_id(self) -> int | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key((self.cursor_row, 0))
        return int(row_key.value)

    def _update_row(self, job_id: int, cells: tuple) -> None:
        old = self._cells[job_id]
        for (_, column, _), before, after in zip(COLUMNS, old, cells):
            if str(before) != str(after) or getattr(before, "style", None) != getattr(after, "style", None):
                self.update_cell(str(job_id), column, after)

    def _cells_for(self, job: JobRow, now: float) -> tuple:
        return (
            _key_text(job.key, COLUMNS[0][2]),
            Text(job.state, style=self._state_style(job.state)),
            job.device or "",
            fmt.clock(job.elapsed(now)),
            fmt.step(job.last_step),
            fmt.loss(job.last_loss),
            str(job.attempts),
        )

    def _state_style(self, state: str) -> str:
        """Theme colours (solid ones: Rich styles cannot take the theme's alpha variants)."""
        if state == "queued":
            return "dim"
        variable = STATE_COLORS.get(state)
        color = self.app.theme_variables.get(variable, "") if variable else ""
        return f"bold {color}" if state in ("running", "failed") and color else color


def _key_text(key: str, width: int) -> str:
    """Long keys keep their end (the config stem) and lose the start."""
    return key if len(key) <= width else "…" + key[-(width - 1):]
