"""Results: one table per dataset (configs x metrics, mean±std over seeds), learning curves, compare,
and for a dataset with a sweep its points by their values (``w``).

Every job of the runs writing under the output root is accounted for as ``lat-tui results`` does it
(results_model), so the ``n`` column reads as the report's (``1 of 3 !``) and ``k`` lists the jobs in
no table with their reason.

The output root is re-aggregated in a thread worker every ``refresh_s`` seconds; the next scan is
armed only when the previous one has been applied, so slow disks never pile scans up. The worker
only posts a message; the handler owns every widget and keeps the cursor on the same config.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import ContentSwitcher, DataTable, Footer, OptionList, Static, Tab, Tabs
from textual.widgets.data_table import RowDoesNotExist

from lat_core.errors import LatError
from lat_core.front.client import Client
from lat_tui.widgets.curve import CurvePlot, shared_spans
from lat_tui.widgets.results_model import (
    BEST_LEGEND, SWEEP_LEGEND, Snapshot, column_keys, column_labels, count_cell, curve_series, load_snapshot,
    metric_cell, natural_descending, row_summary, sorted_rows, sweep_cells, sweep_labels,
)

MAX_MARKS = 2
MARK = "● "


@dataclass(frozen=True)
class RowRef:
    """A table row across refreshes: its dataset and config name."""

    dataset: str
    config: str


class ResultsLoaded(Message):
    def __init__(self, snapshot: Snapshot | None, error: str | None = None):
        super().__init__()
        self.snapshot = snapshot
        self.error = error


class SkippedScreen(ModalScreen):
    """The jobs left out of every table (failed, cancelled, no usable evaluation) and the folders
    that hold no job, each with the reason."""

    HELP_TITLE = "Jobs and folders left out of the results"

    BINDINGS = [Binding("escape,k,q", "dismiss", "Close")]

    def __init__(self, lines: list[str]):
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        with Vertical(id="skipped-box"):
            yield Static(f"{len(self.lines)} left out of the tables  (escape closes)", id="skipped-title")
            yield OptionList(*self.lines, id="skipped-list")


class ResultsScreen(Screen):
    HELP_TITLE = "Results of the run"
    CSS_PATH = "../results.tcss"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("S", "reverse_sort", "Reverse"),
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare"),
        Binding("k", "skipped", "Left out"),
        Binding("w", "sweep", "Sweep"),
        Binding("r", "reload", "Reload"),
        Binding("left,[", "dataset(-1)", "Dataset", show=False),
        Binding("right,]", "dataset(1)", "Dataset", show=False),
    ]

    def __init__(self, output_root: Path, refresh_s: float = 5.0, client: Client | None = None):
        """``client``: the journal's door, to account for the jobs of the runs writing under
        ``output_root`` in their states (without: the folders alone say which jobs there are)."""
        super().__init__()
        self.output_root = Path(output_root)
        self.client = client
        self.refresh_s = refresh_s
        self.snapshot: Snapshot | None = None
        self.dataset: str | None = None
        self.sort_key: str | None = None
        self.sort_reverse = False
        self.marks: list[RowRef] = []
        self.sweep_view = False  # the dataset's sweep points by value instead of its configs
        self._loading = False
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Tabs(id="results-datasets")
        yield DataTable(id="results-table", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="results-sweep", cursor_type="row", zebra_stripes=True)
        with ContentSwitcher(initial="results-single", id="results-detail"):
            with Horizontal(id="results-single"):
                yield Static(id="results-summary", classes="results-summary")
                yield CurvePlot(id="results-curve")
            with Horizontal(id="results-compare"):
                for side in ("a", "b"):
                    with Vertical(classes="results-pane"):
                        yield Static(id=f"compare-summary-{side}", classes="results-summary")
                        yield CurvePlot(id=f"compare-curve-{side}")
        yield Static(BEST_LEGEND, id="results-legend")
        yield Static(id="results-status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#results-status", Static).update(f"scanning {self.output_root} ...")
        self.query_one("#results-table", DataTable).focus()
        self.action_reload()

    # --- loading --------------------------------------------------------------------------------

    def action_reload(self) -> None:
        if self._loading:
            return
        if self._timer is not None:
            self._timer.stop()
        self._loading = True
        self._scan()

    @work(thread=True, exclusive=True, group="results-scan")
    def _scan(self) -> None:
        try:
            self.post_message(ResultsLoaded(load_snapshot(self.output_root, self.client)))
        except LatError as exc:
            self.post_message(ResultsLoaded(None, str(exc)))
        except OSError as exc:
            self.post_message(ResultsLoaded(None, f"cannot read {self.output_root}: {exc}"))

    @on(ResultsLoaded)
    def _loaded(self, message: ResultsLoaded) -> None:
        self._loading = False
        if message.snapshot is not None:
            changed = not _same_view(self.snapshot, message.snapshot)
            self.snapshot = message.snapshot
            if changed:
                self._show_snapshot()
            self._set_status()
        else:
            self._set_status(message.error or "cannot aggregate results")
        self._timer = self.set_timer(self.refresh_s, self.action_reload)

    def _show_snapshot(self) -> None:
        self._fill_tabs()
        self._fill_table()
        self._show_detail()
        self.refresh_bindings()

    # --- dataset tabs ---------------------------------------------------------------------------

    def _fill_tabs(self) -> None:
        tabs = self.query_one("#results-datasets", Tabs)
        names = [t.dataset for t in self.snapshot.tables]
        shown = [str(tab.id) for tab in tabs.query(Tab)]
        if shown != [_tab_id(n) for n in names]:
            tabs.clear()
            for name in names:
                tabs.add_tab(Tab(name, id=_tab_id(name)))
        if self.dataset not in names:
            self.dataset = names[0] if names else None
        if self.dataset is not None and tabs.active != _tab_id(self.dataset):
            tabs.active = _tab_id(self.dataset)

    @on(Tabs.TabActivated, "#results-datasets")
    def _tab_activated(self, event: Tabs.TabActivated) -> None:
        chosen = next((t.dataset for t in self._tables() if _tab_id(t.dataset) == event.tab.id), None)
        if chosen is not None and chosen != self.dataset:
            self.dataset = chosen
            self._fill_table()
            self._show_detail()
            self.refresh_bindings()

    def action_dataset(self, step: int) -> None:
        names = [t.dataset for t in self._tables()]
        if self.dataset in names:
            tabs = self.query_one("#results-datasets", Tabs)
            tabs.active = _tab_id(names[(names.index(self.dataset) + step) % len(names)])

    # --- table ----------------------------------------------------------------------------------

    def _tables(self):
        return self.snapshot.tables if self.snapshot is not None else ()

    def _current_table(self):
        return self.snapshot.table(self.dataset) if self.snapshot is not None else None

    def _fill_table(self) -> None:
        self._show_sweep_view(self.sweep_view and bool(self._sweeps()))
        if self.sweep_view:
            self._fill_sweep()
            return
        table = self.query_one("#results-table", DataTable)
        keep = self.selected_config()
        table.clear(columns=True)
        current = self._current_table()
        if current is None:
            return
        if self.sort_key not in column_keys(current):
            self.sort_key, self.sort_reverse = None, False
        key = self.sort_key or current.columns[0].key
        for column_key, label in zip(column_keys(current), column_labels(current)):
            table.add_column(label + self._sort_arrow(column_key, key), key=column_key)
        best = self._best_style()
        for row in sorted_rows(current, key, self.sort_reverse):
            table.add_row(*self._cells(current, row, best), key=row.config)
        self._restore_cursor(table, keep)

    def _sort_arrow(self, column_key: str, active: str) -> str:
        if column_key != active:
            return ""
        descending = natural_descending(self._current_table(), column_key) != self.sort_reverse
        return " ▼" if descending else " ▲"

    def _best_style(self) -> Style:
        accent = self.app.theme_variables.get("accent")
        return Style(bold=True, color=accent) if accent else Style(bold=True)

    def _cells(self, current, row, best) -> list:
        marked = RowRef(current.dataset, row.config) in self.marks
        name = (MARK if marked else "") + row.config
        return [name, count_cell(row), *(metric_cell(row, c.key, best) for c in current.columns)]

    def _restore_cursor(self, table: DataTable, config: str | None) -> None:
        if config is None or table.row_count == 0:
            return
        try:
            table.move_cursor(row=table.get_row_index(config), animate=False)
        except RowDoesNotExist:  # the config is gone from this dataset; the cursor stays on row 0
            pass

    def selected_config(self) -> str | None:
        """The config of the row under the cursor (in the sweep view, the point's own config)."""
        table = self.query_one("#results-sweep" if self.sweep_view else "#results-table", DataTable)
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return row_key.value

    # --- a sweep's points by value (w) -----------------------------------------------------------

    def _sweeps(self) -> list:
        return self.snapshot.sweeps_of(self.dataset) if self.snapshot is not None else []

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """``w`` where the dataset has a sweep; sorting and marking act on the configs' table only."""
        if action == "sweep":
            return bool(self._sweeps())
        if action in ("cycle_sort", "reverse_sort", "mark", "compare"):
            return not self.sweep_view
        return True

    def action_sweep(self) -> None:
        self.sweep_view = not self.sweep_view
        self._fill_table()
        self._show_detail()
        self.refresh_bindings()

    def _show_sweep_view(self, on: bool) -> None:
        self.sweep_view = on
        configs, points = self.query_one("#results-table", DataTable), self.query_one("#results-sweep", DataTable)
        if points.display != on:
            configs.display, points.display = not on, on
            (points if on else configs).focus()
        self.query_one("#results-legend", Static).update(SWEEP_LEGEND if on else BEST_LEGEND)

    def _fill_sweep(self) -> None:
        """Each point of the dataset's sweeps, keyed by its own config (the detail pane's curve)."""
        table = self.query_one("#results-sweep", DataTable)
        keep = self.selected_config()
        table.clear(columns=True)
        sweeps = self._sweeps()
        labels = sweep_labels(sweeps)
        for label in labels:
            table.add_column(label, key=label)
        best = self._best_style()
        for sweep in sweeps:
            for row in sweep.rows:
                table.add_row(*sweep_cells(sweep, row, labels, best), key=row.config)
        self._restore_cursor(table, keep)

    # --- sorting --------------------------------------------------------------------------------

    def action_cycle_sort(self) -> None:
        current = self._current_table()
        if current is None:
            return
        keys = column_keys(current)
        active = self.sort_key or current.columns[0].key
        self._sort_by(keys[(keys.index(active) + 1) % len(keys)], reverse=False)

    def action_reverse_sort(self) -> None:
        current = self._current_table()
        if current is not None:
            self._sort_by(self.sort_key or current.columns[0].key, reverse=not self.sort_reverse)

    @on(DataTable.HeaderSelected, "#results-table")
    def _header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        same = key == (self.sort_key or self._current_table().columns[0].key)
        self._sort_by(key, reverse=not self.sort_reverse if same else False)

    def _sort_by(self, key: str, reverse: bool) -> None:
        self.sort_key, self.sort_reverse = key, reverse
        self._fill_table()

    # --- detail: curve of the selected row, or two marked rows side by side -------------------

    @on(DataTable.RowHighlighted, "#results-table")
    @on(DataTable.RowHighlighted, "#results-sweep")
    def _row_highlighted(self) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        switcher = self.query_one("#results-detail", ContentSwitcher)
        if switcher.current == "results-compare" and len(self.marks) == MAX_MARKS:
            scale = shared_spans([self._series_of(ref) for ref in self.marks])  # one y-scale for both sides
            for side, ref in zip("ab", self.marks):
                self._show_row(ref, f"#compare-summary-{side}", f"#compare-curve-{side}", compact=True, ys=scale)
            return
        switcher.current = "results-single"
        config = self.selected_config()
        ref = RowRef(self.dataset, config) if config is not None and self.dataset else None
        self._show_row(ref, "#results-summary", "#results-curve")

    def _series_of(self, ref: RowRef) -> list:
        return curve_series(self.snapshot.jobs(ref.dataset, ref.config)) if self.snapshot else []

    def _show_row(self, ref: RowRef | None, summary_id: str, curve_id: str, compact: bool = False,
                  ys: tuple | None = None) -> None:
        summary, curve = self.query_one(summary_id, Static), self.query_one(curve_id, CurvePlot)
        table = self.snapshot.table(ref.dataset) if ref is not None and self.snapshot else None
        row = next((r for r in table.rows if r.config == ref.config), None) if table else None
        if row is None:
            summary.update("no finished evaluation yet" if ref is None else f"{ref.config}: gone")
            curve.show([])
            return
        lines = row_summary(table, row, compact)
        summary.update(Text("\n").join(Text(line) for line in (lines if compact else [ref.config, *lines])))
        curve.show(self._series_of(ref), ys=ys)

    def action_mark(self) -> None:
        config = self.selected_config()
        if config is None or self.dataset is None:
            return
        ref = RowRef(self.dataset, config)
        if ref in self.marks:
            self.marks.remove(ref)
        else:
            self.marks = [*self.marks, ref][-MAX_MARKS:]
        self._fill_table()
        self._set_status()

    def action_compare(self) -> None:
        switcher = self.query_one("#results-detail", ContentSwitcher)
        if switcher.current == "results-compare":
            switcher.current = "results-single"
        elif len(self.marks) < MAX_MARKS:
            self.notify("mark two rows with space first", title="Compare")
            return
        else:
            switcher.current = "results-compare"
        self._show_detail()

    # --- status line and the skipped list ------------------------------------------------------

    def _set_status(self, problem: str | None = None) -> None:
        status = self.query_one("#results-status", Static)
        if problem is not None:
            status.update(f"[b]{problem}[/b]  (retrying every {self.refresh_s:g}s)")
            return
        report, running = self.snapshot.report, len(self.snapshot.running)
        parts = [f"{len(report.results) - running} succeeded", f"{running} running"]
        if self.snapshot.queued:
            parts.append(f"{self.snapshot.queued} queued")
        left_out = len(self.snapshot.left_out_lines())
        if left_out:
            parts.append(f"{left_out} left out: press k to list")
        if self.marks:
            parts.append("marked " + ", ".join(m.config for m in self.marks))
        status.update(" · ".join(parts))

    def action_skipped(self) -> None:
        lines = self.snapshot.left_out_lines() if self.snapshot is not None else []
        if not lines:
            self.notify("every job is in a table or still on its way", title="Results")
            return
        self.app.push_screen(SkippedScreen(lines))


def _same_view(old: Snapshot | None, new: Snapshot) -> bool:
    """True when a rescan changed nothing the screen shows (so the table is not rebuilt)."""
    return old is not None and (old.tables, old.sweeps, old.running, old.report.results, old.report.accounts,
                                old.report.skipped) == \
        (new.tables, new.sweeps, new.running, new.report.results, new.report.accounts, new.report.skipped)


def _tab_id(dataset: str) -> str:
    """A widget id for a dataset name (ids allow letters, digits, - and _ only)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in dataset)
    return f"ds-{safe}-{zlib.crc32(dataset.encode()):08x}"
