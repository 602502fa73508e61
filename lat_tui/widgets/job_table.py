"""The job table: one row per job, updated in place so the cursor and scroll stay put."""

from __future__ import annotations

import re

import time

from rich.text import Text
from textual.widgets import DataTable

from lat_core.rows import JobRow
from lat_tui.columns import JOB_COLUMNS, state_text
KEY_MIN_WIDTH = 12  # at 80 columns the id column leaves the key 12
KEY_MAX_WIDTH = 48
CHROME = 2 + 2  # the cell padding of the key column, and the vertical scrollbar

STATE_COLORS = {"running": "accent", "succeeded": "success", "failed": "error", "cancelled": "warning"}


class JobTable(DataTable):
    """Rows are keyed by job id; ``show_jobs`` adds new rows and rewrites only changed cells."""

    def __init__(self, **kwargs):
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[int, tuple] = {}

    def on_mount(self) -> None:
        self.key_width = self._key_width(self.app.size.width)
        for column in JOB_COLUMNS:
            self.add_column(column.header, key=column.key, width=self.key_width if column.key == "key" else column.width)

    @staticmethod
    def _key_width(screen_width: int) -> int:
        """The job key takes what the other columns leave of the screen."""
        others = sum(c.width + 2 for c in JOB_COLUMNS if c.key != "key")
        return max(KEY_MIN_WIDTH, min(KEY_MAX_WIDTH, screen_width - others - CHROME))

    def clear_jobs(self) -> None:
        self.clear()
        self._cells.clear()

    def show_jobs(self, jobs: list[JobRow]) -> None:
        now = time.time()
        self._one_dataset = len({j.dataset for j in jobs}) <= 1
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
        for column, before, after in zip(JOB_COLUMNS, old, cells):
            if str(before) != str(after) or getattr(before, "style", None) != getattr(after, "style", None):
                self.update_cell(str(job_id), column.key, after)

    def _cells_for(self, job: JobRow, now: float) -> tuple:
        """The shared column spec's text; the key is shortened to fit and the state coloured."""
        cells = []
        for column in JOB_COLUMNS:
            if column.key == "key":
                cells.append(_key_text(job.key, self.key_width, with_dataset=not getattr(self, "_one_dataset", False)))
            elif column.key == "state":
                cells.append(Text(state_text(job.state), style=self._state_style(job.state)))
            else:
                cells.append(column.cell(job, now))
        return tuple(cells)

    def _state_style(self, state: str) -> str:
        """Theme colours (solid ones: Rich styles cannot take the theme's alpha variants)."""
        if state == "queued":
            return "dim"
        variable = STATE_COLORS.get(state)
        color = self.app.theme_variables.get(variable, "") if variable else ""
        return f"bold {color}" if state in ("running", "failed") and color else color


def _key_text(key: str, width: int, with_dataset: bool = True) -> str:
    """A key that does not fit becomes ``config@seed:dataset`` (``tiny_lora_qkvo@1:tiny-sst2``),
    or ``config@seed`` when every job of the run has the same dataset.

    Jobs of one run mostly differ in their config, so the config name keeps the most room; the
    seed always stays; the dataset is cut first, then the middle of the config name.
    """
    if len(key) <= width:
        return key
    head, sep, stem = key.partition("/")
    match = re.fullmatch(r"(.+)_seed(\d+)", head)
    if not sep or not match:
        return "…" + key[-(width - 1):]
    dataset, seed = match.groups()
    if not with_dataset:
        return _keep_both_ends(stem, width - 1 - len(seed)) + "@" + seed
    pair_min = len(seed) + 1 + min(len(dataset), 5)
    pair_room = max(pair_min, width - 1 - len(stem))
    pair = _keep_start(f"{seed}:{dataset}", pair_room)
    return _keep_both_ends(stem, width - 1 - len(pair)) + "@" + pair


def _keep_start(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _keep_end(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _keep_both_ends(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    front = (width - 1) // 2
    return text[:front] + "…" + text[len(text) - (width - 1 - front):]
