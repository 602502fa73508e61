"""The run picker (``ctrl+r`` on the dashboard): every run in the journal, newest first, with how
many of its jobs run, wait, are done and failed (a run with failures is the one to look at);
enter views the highlighted one, escape keeps the current one."""

from __future__ import annotations

import time
from pathlib import Path

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


RUNS_BOX_MAX_WIDTH = 100  # app.tcss: #runs-box

# the job states a run's line counts, as it names them, in this order
COUNTED = (("running", "running"), ("queued", "queued"), ("succeeded", "done"), ("failed", "failed"),
           ("cancelled", "cancelled"))


def run_label(run: RunRow, current: int | None, counts: dict[str, int] | None = None,
              width: int = 10**6) -> Text:
    """Two lines: the run, its state and its jobs' counts; when it was made and where its outputs go
    (in ``width`` cells: a long output root keeps its end, where runs' roots differ)."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.created))
    text = Text(f"run {run.id:<4} ", style="bold")
    text.append(f"{run.state:<10} ", style="" if run.state in RUN_ACTIVE else "dim")
    text.append_text(job_counts_text(counts or {}))
    if run.id == current:
        text.append("  (shown)", style="italic")
    where = f"  {when}  "
    text.append(f"\n{where}{path_end(home_short(run.output_root), width - len(where))}", style="dim")
    return text


def home_short(path: str) -> str:
    """``~/runs`` for a path under the home folder."""
    home = str(Path.home())
    return "~" + path[len(home):] if path == home or path.startswith(home + "/") else path


def path_end(path: str, width: int) -> str:
    """``…/november/runs-sweep-lr``: the path's last whole folders that fit ``width``."""
    if len(path) <= width:
        return path
    tail = path[len(path) - max(width - 1, 1):]
    cut = tail.find("/")
    return "…" + (tail[cut:] if cut >= 0 and len(tail) - cut > 1 else tail)


def label_width(screen_width: int) -> int:
    """What a label has of the screen: #runs-box's width (app.tcss), less its border and the
    list's border and padding."""
    return min(screen_width * 9 // 10, RUNS_BOX_MAX_WIDTH) - 6


def job_counts_text(counts: dict[str, int]) -> Text:
    """``2 running · 3 queued · 5 done · 1 failed``, failures in bold; "no jobs" for none."""
    shown = [(counts[state], word) for state, word in COUNTED if counts.get(state)]
    if not shown:
        return Text("no jobs", style="dim")
    return Text(" · ").join(Text(f"{n} {word}", style="bold" if word == "failed" else "") for n, word in shown)


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
        width = label_width(self.app.size.width)
        options.add_options([Option(run_label(run, self.current, self._counts(run.id), width), id=str(run.id))
                             for run in runs])
        shown = next((n for n, run in enumerate(runs) if run.id == self.current), 0)
        if runs:
            options.highlighted = shown
        options.focus()

    def _counts(self, run_id: int) -> dict[str, int]:
        try:
            return self.client.job_counts(run_id)
        except LatError:  # the list shows the run all the same, without its counts
            return {}

    @on(OptionList.OptionSelected, "#runs-list")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
