"""Triage: the run's failed jobs, why each failed, and its ranked remedies to retry with.

``1``..``9`` (or ``enter`` on a remedy) requeues the highlighted job with that remedy; the engine
applies the remedy's patch before the job runs again and records it in the job's history.
"""

from __future__ import annotations


from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, OptionList, Static
from textual.widgets.option_list import Option

from lat_core.errors import LatError
from lat_core.contract.diagnosis import Remedy
from lat_core.contract.rows import JobRow
from lat_tui.context import AppContext
from lat_tui.screens.controls import RunControls
from lat_tui.columns import job_name, table_names

RELOAD_AFTER_SECONDS = 1.5
NAME_WIDTH = 28


class TriageScreen(Screen):
    HELP_TITLE = "Failed jobs: diagnosis and remedies"
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("r", "requeue", "Requeue as is"),
        *[Binding(str(n), f"remedy({n})", "Requeue with remedy", key_display="1-9", show=n == 1)
          for n in range(1, 10)],
    ]

    def __init__(self, context: AppContext, run_id: int, controls: RunControls):
        super().__init__()
        self.context = context
        self.run_id = run_id
        self.controls = controls
        self._failed: dict[int, JobRow] = {}
        self._shown: int | None = None
        self._listed: dict[int, str] = {}  # job id -> its name in the list, cut as the job table cuts

    def compose(self) -> ComposeResult:
        yield Static(id="triage-title", classes="screen-title")
        yield DataTable(id="failed", cursor_type="row", zebra_stripes=True)
        yield Static(id="diagnosis")
        yield OptionList(id="remedies")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#failed", DataTable)
        table.add_column("job", key="key", width=NAME_WIDTH)
        table.add_column("class", key="class", width=16)
        table.add_column("why", key="title")
        self.reload()
        table.focus()

    def reload(self) -> None:
        try:
            jobs = self.context.client.jobs(self.run_id)
        except LatError as exc:
            self.notify(str(exc), title="Cannot read the journal", severity="error")
            return
        self._failed = {job.id: job for job in jobs if job.state == "failed"}
        self._listed = table_names(list(self._failed.values()), self.controls.job_families, lambda _: NAME_WIDTH)
        self._fill_table()

    def _fill_table(self) -> None:
        table = self.query_one("#failed", DataTable)
        keep = self._shown
        table.clear()
        for job in self._failed.values():
            diagnosis = job.diagnosis
            table.add_row(self._listed[job.id], diagnosis.cls if diagnosis else "?",
                          diagnosis.title if diagnosis else job.error or "", key=str(job.id))
        count = len(self._failed)
        title = f"Triage · run {self.run_id} · {count} failed job{'s' if count != 1 else ''}"
        self.query_one("#triage-title", Static).update(Text(title, style="bold"))
        if keep in self._failed:
            table.move_cursor(row=table.get_row_index(str(keep)))
        self._show_job(self._highlighted())

    def _highlighted(self) -> JobRow | None:
        table = self.query_one("#failed", DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key((table.cursor_row, 0))
        return self._failed.get(int(row_key.value))

    @on(DataTable.RowHighlighted, "#failed")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_job(self._failed.get(int(event.row_key.value)) if event.row_key.value else None)

    @on(DataTable.RowSelected, "#failed")
    def _row_selected(self, _event: DataTable.RowSelected) -> None:
        remedies = self.query_one("#remedies", OptionList)
        if remedies.option_count:
            if remedies.highlighted is None:
                remedies.highlighted = 0
            remedies.focus()

    def _show_job(self, job: JobRow | None) -> None:
        self._shown = job.id if job else None
        remedies = self.query_one("#remedies", OptionList)
        remedies.clear_options()
        if job is None:
            self.query_one("#diagnosis", Static).update(Text("No failed jobs in this run.", style="italic"))
            return
        text = Text(f"{self._name_of(job)}\n", style="bold")
        text.append((job.diagnosis.diagnosis if job.diagnosis else "") or job.error or "no diagnosis recorded")
        self.query_one("#diagnosis", Static).update(text)
        remedies.add_options([Option(remedy_label(n, r), id=r.key) for n, r in enumerate(_remedies(job), 1)])

    def _name_of(self, job: JobRow) -> str:
        return job_name(job, self.controls.job_families.get(job.id))

    @on(OptionList.OptionSelected, "#remedies")
    def _remedy_selected(self, event: OptionList.OptionSelected) -> None:
        self.action_remedy(event.option_index + 1)

    def action_remedy(self, rank: int) -> None:
        job = self._highlighted()
        remedies = _remedies(job) if job else ()
        if job is None:
            return
        if not 1 <= rank <= len(remedies):
            self.notify(f"{self._name_of(job)} has {len(remedies)} remed{'y' if len(remedies) == 1 else 'ies'}.",
                        severity="warning")
            return
        if self.controls.requeue(job, remedies[rank - 1]):
            self.set_timer(RELOAD_AFTER_SECONDS, self.reload)

    def action_requeue(self) -> None:
        job = self._highlighted()
        if job is not None and self.controls.requeue(job):
            self.set_timer(RELOAD_AFTER_SECONDS, self.reload)


def _remedies(job: JobRow) -> tuple[Remedy, ...]:
    return job.diagnosis.remedies if job.diagnosis else ()


def remedy_label(rank: int, remedy: Remedy) -> Text:
    text = Text(f"{rank}. ", style="bold")
    text.append(remedy.key, style="bold")
    text.append(f"  {remedy.cost}\n", style="dim")
    text.append(f"   {remedy.change}")
    return text
