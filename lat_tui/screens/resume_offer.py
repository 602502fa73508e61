"""Asked before requeueing a failed or cancelled job that left checkpoints: continue from the
newest one, or start over (the engine clears the old checkpoints then). The CLI's
``lat-tui requeue N`` makes the same offer; both send the requeue command's ``start`` argument."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from lat_core.contract.commands import FRESH, RESUME
from lat_core.contract.rows import JobSummary


def offer_text(job: JobSummary, name: str, checkpoints: list[tuple[int, Path]]) -> Text:
    """``name``: the job table's name for the job."""
    step, path = checkpoints[-1]
    text = Text(f"Requeue {name}\n\n", style="bold")
    text.append(f"It is {job.state} and left {len(checkpoints)} checkpoint(s), the newest {path.name} "
                f"(step {step}).\n\n")
    text.append("r", style="bold")
    text.append(f"  resume from {path.name}\n")
    text.append("f", style="bold")
    text.append("  start fresh from step 0 (its checkpoints are cleared)\n")
    text.append("escape", style="bold")
    text.append("  requeue nothing")
    return text


class ResumeOffer(ModalScreen[str | None]):
    """Dismisses with ``resume``, ``fresh``, or None (nothing is sent)."""

    HELP_TITLE = "Resume from a checkpoint, or start fresh"

    BINDINGS = [
        Binding("r", f"dismiss('{RESUME}')", "Resume"),
        Binding("f", f"dismiss('{FRESH}')", "Fresh"),
        Binding("escape,q", "dismiss(None)", "Back"),
    ]

    def __init__(self, job: JobSummary, name: str, checkpoints: list[tuple[int, Path]]):
        super().__init__()
        self.job = job
        self.name_shown = name
        self.checkpoints = checkpoints

    def compose(self) -> ComposeResult:
        with Vertical(id="offer-box"):
            yield Static(offer_text(self.job, self.name_shown, self.checkpoints))
