"""A small modal to add suites x pairs to the live run, expanded against the run's own plan.

The expansion (and writing each job's directory) runs in a thread worker; the modal dismisses with
the job records, which the dashboard sends to the engine as one ``AddJobs`` command.
"""

from __future__ import annotations


from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from lat_core.errors import LatError, PlanError
from lat_core.contract.rows import RunRow
from lat_tui.context import AppContext
from lat_tui.screens.fields import FIELD_KEYS, FieldFocus


class JobsExpanded(Message):
    def __init__(self, jobs: list[dict] | None, problems: list[str]):
        super().__init__()
        self.jobs = jobs
        self.problems = problems


def _row(label: str, field: Input) -> Horizontal:
    return Horizontal(Label(label, classes="add-label"), field, classes="add-row")


class AddJobsScreen(FieldFocus, ModalScreen[list[dict] | None]):
    HELP_TITLE = "Add jobs to this run"
    BINDINGS = [
        Binding("escape", "dismiss_none", "Cancel"),
        Binding("ctrl+s", "submit", "Add", priority=True),
        *FIELD_KEYS,  # keys typed ahead after tab land in the next field
    ]

    def __init__(self, context: AppContext, run: RunRow):
        super().__init__()
        self.context = context
        self.run = run
        self._busy = False

    def compose(self) -> ComposeResult:
        names = " ".join(self.context.registry.names())
        with Vertical(id="add-dialog"):
            yield Label(f"[b]Add jobs to run {self.run.id}[/b]  (same devices and env)")
            yield _row("Suites", Input(id="add-suites", placeholder=names or "suite names", compact=True))
            yield _row("Rounds", Input("all", id="add-rounds", compact=True))
            yield _row("Pairs", Input(id="add-pairs", placeholder="seed:dataset, e.g. 3:tiny-sst2", compact=True))
            yield Static("enter/ctrl+s: add · escape: cancel", id="add-hint")
            yield Static(id="add-problems")

    def on_mount(self) -> None:
        self.query_one("#add-suites", Input).focus()

    @on(Input.Submitted)
    def _submitted(self, _event: Input.Submitted) -> None:
        self.action_submit()

    def action_dismiss_none(self) -> None:
        self.dismiss(None)

    def action_submit(self) -> None:
        if self._busy:
            return
        suites = self.query_one("#add-suites", Input).value.split()
        pairs = self.query_one("#add-pairs", Input).value.strip()
        problems = ([] if suites else ["suites: name at least one suite"]) + ([] if pairs else ["pairs: give at least one seed:dataset"])
        if problems:
            self._show_problems(problems)
            return
        self._busy = True
        self._show_problems(["expanding ..."], error=False)
        rounds = self.query_one("#add-rounds", Input).value.strip() or "all"
        self._expand(suites, rounds, pairs)

    @work(thread=True, group="add-jobs")
    def _expand(self, suites: list[str], rounds: str, pairs: str) -> None:
        try:
            jobs = self.context.client.jobs_to_add(self.run, suites, rounds, pairs, self.context.registry)
        except PlanError as exc:
            self.post_message(JobsExpanded(None, list(exc.problems)))
        except (LatError, OSError, ValueError) as exc:
            self.post_message(JobsExpanded(None, [str(exc)]))
        else:
            self.post_message(JobsExpanded(jobs, []))

    @on(JobsExpanded)
    def _expanded(self, message: JobsExpanded) -> None:
        self._busy = False
        if message.jobs is None:
            self._show_problems(message.problems)
        elif not message.jobs:
            self._show_problems(["these suites and pairs expand to no jobs"])
        else:
            self.dismiss(message.jobs)

    def _show_problems(self, problems: list[str], error: bool = True) -> None:
        box = self.query_one("#add-problems", Static)
        box.set_class(error, "-error")
        box.update(Text("\n".join(problems)))
