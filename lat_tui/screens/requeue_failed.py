"""Asked before every failed and cancelled job of the run goes back to the queue (``F`` on the
dashboard; ``lat-tui requeue --failed`` in a shell): which jobs, and how each would start. One
answer for all: each resumes from its newest checkpoint where it left one, else starts fresh; or
every one starts fresh. The engine requeues them in one command, all or none."""

from __future__ import annotations

from typing import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from lat_core.contract.commands import FRESH, RESUME
from lat_core.contract.rows import JobSummary
from lat_core.front.client import requeue_start

LISTED = 12  # jobs named one a line; the rest are counted


def confirm_text(jobs: list[JobSummary], name_of: Callable[[JobSummary], str]) -> Text:
    """``name_of``: the job table's name for a job."""
    text = Text(f"Requeue {len(jobs)} failed or cancelled job{'s' if len(jobs) != 1 else ''}\n\n", style="bold")
    for job in jobs[:LISTED]:
        text.append(f"  {job.id:>4} {name_of(job)}  {job.state}: {requeue_start(job.job_dir, None)[1]}\n")
    if len(jobs) > LISTED:
        text.append(f"  ... and {len(jobs) - LISTED} more\n")
    text.append("\n")
    for key, what in (("y", "requeue: each resumes where it left a checkpoint, else starts fresh"),
                      ("f", "requeue, every job fresh from step 0 (checkpoints are cleared)"),
                      ("escape", "requeue nothing")):
        text.append(key, style="bold")
        text.append(f"  {what}\n")
    text.rstrip()
    return text


class RequeueFailedConfirm(ModalScreen[str | None]):
    """Dismisses with ``resume``, ``fresh``, or None (nothing is sent)."""

    HELP_TITLE = "Requeue every failed and cancelled job"

    BINDINGS = [
        Binding("y,enter", f"dismiss('{RESUME}')", "Requeue"),
        Binding("f", f"dismiss('{FRESH}')", "All fresh"),
        Binding("escape,n,q", "dismiss(None)", "Back"),
    ]

    def __init__(self, jobs: list[JobSummary], name_of: Callable[[JobSummary], str]):
        super().__init__()
        self.jobs = jobs
        self.name_of = name_of

    def compose(self) -> ComposeResult:
        with Vertical(id="offer-box"):
            yield Static(confirm_text(self.jobs, self.name_of))
