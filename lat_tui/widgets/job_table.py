"""The job table: one row per job, a fused group's line above its members' rows; updated in place
so the cursor and scroll stay put."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from lat_core.contract.rows import GroupUsage, JobSummary
from lat_tui import fmt
from lat_tui.columns import JOB_COLUMNS, Column, GroupLine, Shown, names_key, state_text, table_rows

KEY_MIN_WIDTH = 12
KEY_MAX_WIDTH = 48
# below this the ``try`` column gives its cells to the names (the detail line says a job's
# attempts): at 80 columns the names get 18 cells instead of 12, room for what tells jobs apart
KEY_WANTED_WIDTH = 18
NARROW_LEFT_OUT = ("attempts",)
ELAPSED_TICK_S = 5
CHROME = 2 + 1  # the cell padding of the key column, and the vertical scrollbar (app.tcss: #jobs)

STATE_COLORS = {"running": "accent", "succeeded": "success", "failed": "error", "cancelled": "warning",
                "pruned": "secondary"}


class JobTable(DataTable):
    """Rows are keyed by job id; ``show_jobs`` adds new rows and rewrites only changed cells."""

    def __init__(self, **kwargs):
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[str, tuple] = {}  # row key -> its cells, in the table's order
        self._drawn_from: dict[str, tuple] = {}  # row key -> what its cells were made of
        self._first_member: dict[str, int] = {}  # a group line's row key -> its first member's job id
        self._reselect: int | None = None
        self.names: Mapping[int, str] = {}  # job id -> its name as the table shows it (branch aside)
        self._names_key: tuple = ()  # what they were made of (columns.names_key)

    def on_mount(self) -> None:
        self._lay_out(self.app.size.width)

    def _lay_out(self, screen_width: int) -> None:
        """The columns for the screen's width (again after a resize: the rows are drawn again)."""
        self.screen_width = screen_width
        self.shown_columns = shown_columns(screen_width)
        self.key_width = key_width(screen_width, self.shown_columns)
        self.clear(columns=True)
        for column in self.shown_columns:
            self.add_column(column.header, key=column.key, width=self.key_width if column.key == "key" else column.width)

    def clear_jobs(self) -> None:
        self.clear()
        self._cells.clear()
        self._drawn_from.clear()
        self._first_member.clear()

    def show_jobs(self, jobs: list[JobSummary], families: dict[int, str] | None = None,
                  groups: dict[str, GroupUsage] | None = None) -> None:
        """``groups``: the run's fused groups; each shows as a line with its memory, its members'
        rows under it (rows keep their place, so the table is rebuilt when a group forms or ends)."""
        if self.app.size.width != self.screen_width:
            selected = self.selected_job_id()
            self.clear_jobs()
            self._lay_out(self.app.size.width)
            self._reselect = selected
        key = names_key(jobs, families or {}, self.key_width)
        shown = Shown.of(jobs, families, name_width=self.key_width,
                         names=self.names if key == self._names_key else None)  # 10,000 jobs: 0.1 s a poll
        self.names, self._names_key = shown.names, key
        rows = table_rows(jobs, groups)
        keys = [row_key(r) for r in rows]
        if keys[:len(self._cells)] != list(self._cells):
            self._rebuild()
        for key, row in zip(keys, rows):
            running = row.running if isinstance(row, GroupLine) else row.state == "running"
            source = (row, shown.families.get(row.id), shown.names.get(row.id)) if isinstance(row, JobSummary) else row
            if not running and self._drawn_from.get(key) == source:
                continue  # nothing it shows can have changed (a running job's clock can)
            self._drawn_from[key] = source
            if isinstance(row, GroupLine):
                self._first_member[key] = row.members[0].id
            cells = self._cells_for(row, shown)
            if key not in self._cells:
                self.add_row(*cells, key=key)
            else:
                self._update_row(key, cells)
            self._cells[key] = cells
        self._keep_cursor()

    def _keep_cursor(self) -> None:
        """After a rebuild, the cursor back on the job it was on."""
        key, self._reselect = (None if self._reselect is None else str(self._reselect)), None
        if key in self._cells:
            self.move_cursor(row=self.get_row_index(RowKey(key)))

    def _rebuild(self) -> None:
        """Rows in a new order (a group formed, or ended): drawn again, the cursor kept on its job."""
        selected = self.selected_job_id()
        self.clear_jobs()
        self._reselect = selected

    def job_id_at(self, key: str | None) -> int | None:
        """The job a row stands for: its own, or for a group's line its first member."""
        if key is None:
            return None
        return self._first_member.get(key) or int(key)

    def selected_job_id(self) -> int | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key((self.cursor_row, 0))
        return self.job_id_at(row_key.value)

    def _update_row(self, key: str, cells: tuple) -> None:
        old = self._cells[key]
        changed = {column.key: after for column, before, after in zip(self.shown_columns, old, cells)
                   if str(before) != str(after) or getattr(before, "style", None) != getattr(after, "style", None)}
        if changed:
            self._repaint_row(key, changed)

    def _repaint_row(self, key: str, changed: dict[str, object]) -> None:
        """Writes a row's changed cells and repaints that row alone.

        ``DataTable.update_cell`` bumps one table-wide cache generation, so one ticking clock made
        every visible row render again (the dashboard's largest idle cost). Here only the changed
        cells' cached renders and their row's are dropped; the columns are fixed-width, so no other
        row can move.
        """
        row_key = RowKey(key)
        row_index = self.get_row_index(row_key)
        columns = {ColumnKey(key) for key in changed}
        data = self._data[row_key]
        for column_key, value in changed.items():
            data[ColumnKey(column_key)] = value
        # each cache of a rendering stage, by its key's layout: (generation, row index) for the
        # formatted cells, (row, column, ...) for a rendered cell, (row, line, ...) for a row
        for key in [k for k in self._row_renderable_cache.keys() if k[1] == row_index]:
            self._row_renderable_cache.discard(key)
        for key in [k for k in self._cell_render_cache.keys() if k[0] == row_key and k[1] in columns]:
            self._cell_render_cache.discard(key)  # the row's unchanged cells stay rendered
        for key in [k for k in self._row_render_cache.keys() if k[0] == row_key]:
            self._row_render_cache.discard(key)
        self._line_cache.clear()  # keyed by screen line; the other lines rebuild from their cached rows
        self.refresh_row(row_index)

    def _cells_for(self, row: JobSummary | GroupLine, shown: Shown) -> tuple:
        """The shared column spec's text; a running job's clock ticks coarsely, the state is coloured."""
        if isinstance(row, GroupLine):
            by_key = row.cells(shown)
            state = Text(by_key["state"], style=self._state_style("running" if row.running else "queued"))
            return tuple(state if c.key == "state" else by_key.get(c.key, "") for c in self.shown_columns)
        cells = []
        for column in self.shown_columns:
            if column.key == "elapsed" and row.state == "running":
                cells.append(fmt.clock(_ticked(row.time_spent(shown.now))))
            elif column.key == "state":
                cells.append(Text(state_text(row.state), style=self._state_style(row.state)))
            else:
                cells.append(column.cell(row, shown))
        return tuple(cells)

    def _state_style(self, state: str) -> str:
        """Theme colours (solid ones: Rich styles cannot take the theme's alpha variants)."""
        if state == "queued":
            return "dim"
        variable = STATE_COLORS.get(state)
        color = self.app.theme_variables.get(variable, "") if variable else ""
        return f"bold {color}" if state in ("running", "failed") and color else color


def shown_columns(screen_width: int) -> tuple[Column, ...]:
    """Every column, or on a screen that would leave the names under KEY_WANTED_WIDTH cells, all
    but NARROW_LEFT_OUT."""
    if key_width(screen_width, JOB_COLUMNS) >= KEY_WANTED_WIDTH:
        return JOB_COLUMNS
    return tuple(c for c in JOB_COLUMNS if c.key not in NARROW_LEFT_OUT)


def key_width(screen_width: int, columns: tuple[Column, ...]) -> int:
    """The job key takes what the other columns leave of the screen."""
    others = sum(c.width + 2 for c in columns if c.key != "key")
    return max(KEY_MIN_WIDTH, min(KEY_MAX_WIDTH, screen_width - others - CHROME))


def row_key(row: JobSummary | GroupLine) -> str:
    """A job's row is keyed by its id, a group's line by ``g`` and the group's id."""
    return f"g{row.group.id}" if isinstance(row, GroupLine) else str(row.id)


def _ticked(seconds: float | None) -> float | None:
    """A running job's time in steps of ELAPSED_TICK_S: each tick repaints the running jobs' rows."""
    return None if seconds is None else seconds // ELAPSED_TICK_S * ELAPSED_TICK_S
