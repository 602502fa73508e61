"""The run picker (``ctrl+r`` on the dashboard): every run in the journal, newest first; enter
views the highlighted one, escape keeps the current one."""

from __future__ import annotations

import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from lat_core.front.client import RUN_ACTIVE, Client
from lat_core.errors import LatError
from lat_core.contract.rows import RunRow


def run_label(run: RunRow, current: int | None) -> Text:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.created))
    text = Text(f"run {run.id:<4} ", style="bold")
    text.append(f"{run.state:<10} ", style="" if run.state in RUN_ACTIVE else "dim")
    text.append(f"{when}  {run.output_root}")
    if run.id == current:
        text.append("  (shown)", style="italic")
    return text


class RunPicker(ModalScreen[int | None]):
    """Dismisses with the picked run's id, or None."""

    HELP_TITLE = "Pick a run to view"

    BINDINGS = [Binding("escape,q", "dismiss_none", "Back")]

    def __init__(self, client: Client, current: int | None = None):
        super().__init__()
        self.client = client
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="runs-box"):
            yield Static("Runs  [dim]enter: view · escape: back[/dim]", classes="box-title")
            yield OptionList(id="runs-list")

    def on_mount(self) -> None:
        options = self.query_one("#runs-list", OptionList)
        try:
            runs = sorted(self.client.runs(), key=lambda run: run.id, reverse=True)
        except LatError as exc:
            self.notify(str(exc), title=exc.title, severity="error")
            runs = []
        options.add_options([Option(run_label(run, self.current), id=str(run.id)) for run in runs])
        shown = next((n for n, run in enumerate(runs) if run.id == self.current), 0)
        if runs:
            options.highlighted = shown
        options.focus()

    @on(OptionList.OptionSelected, "#runs-list")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
