"""One job in full: where it lives, its usage, its diagnosis, its env overrides and its history.

Opened with ``enter`` on the dashboard's job table; it reads the job again on each dashboard poll. The history is the journal's transitions for
the job: state changes and the commands applied to it (cancel, requeue with a remedy, ...).
"""

from __future__ import annotations

import time

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from lat_core.front.client import JOB_FINAL, fmt_bytes
from lat_core.errors import LatError
from lat_core.contract.diagnosis import Diagnosis
from lat_core.contract.rows import JobRow, Transition
from lat_tui import fmt
from lat_tui.context import AppContext
from lat_tui.screens.controls import RunControls


class JobLoaded(Message):
    def __init__(self, job: JobRow | None, history: list[Transition], problem: str = ""):
        super().__init__()
        self.job = job
        self.history = history
        self.problem = problem


class JobScreen(Screen):
    """One job in full, refreshed on every dashboard poll."""

    HELP_TITLE = "One job in full"

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("r", "requeue", "Requeue", tooltip="Requeue this ended job (offers resume)"),
        Binding("c", "cancel_job", "Cancel job", tooltip="Cancel this job (a running one: press twice)"),
    ]

    def __init__(self, context: AppContext, job_id: int, controls: RunControls):
        super().__init__()
        self.context = context
        self.job_id = job_id
        self.controls = controls
        self._job: JobRow | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="job-title", classes="screen-title")
        with VerticalScroll(id="job-body"):
            yield Static(id="job-text")
        yield Footer()

    def on_mount(self) -> None:
        self.controls.poll_listeners.append(self.reload)
        self.reload()

    def on_unmount(self) -> None:
        if self.reload in self.controls.poll_listeners:
            self.controls.poll_listeners.remove(self.reload)

    def reload(self) -> None:
        self._read()

    @work(thread=True, group="job-screen", exclusive=True)
    def _read(self) -> None:
        client = self.context.client
        try:
            job = client.job(self.job_id)
            history = client.history(job.run_id, job_id=job.id)
        except LatError as exc:
            self.post_message(JobLoaded(None, [], f"cannot read the journal: {exc}"))
        else:
            self.post_message(JobLoaded(job, history))
        finally:
            client.close()  # this worker thread's connection ends with the read

    @on(JobLoaded)
    def _loaded(self, message: JobLoaded) -> None:
        if message.job is None:
            self.query_one("#job-text", Static).update(Text(message.problem))
            return
        job = message.job
        if self._job is None or self._job.state != job.state:
            self.refresh_bindings()
        self._job = job
        self.query_one("#job-title", Static).update(Text(f"job {job.id} · {self.controls.name_of(job)}", style="bold"))
        self.query_one("#job-text", Static).update(describe(job, message.history))

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "requeue":
            return self._job is not None and self._job.state in JOB_FINAL
        if action == "cancel_job":
            return self._job is not None and self._job.state not in JOB_FINAL
        return True

    def action_requeue(self) -> None:
        if self._job:
            self.controls.requeue(self._job)

    def action_cancel_job(self) -> None:
        if self._job:
            self.controls.cancel_job(self._job)


def describe(job: JobRow, history: list[Transition]) -> Text:
    text = Text()
    text.append(_header(job), style="bold")
    _section(text, "Directory", [job.job_dir])
    _section(text, "Memory", [_usage(job)])
    if job.error:
        _section(text, "Error", [job.error])
    if job.diagnosis:
        _section(text, "Diagnosis", diagnosis_lines(job.diagnosis))
    env = [f"{key}={value}" for key, value in sorted((job.env or {}).items())]
    _section(text, "Env overrides", env or ["(none)"])
    _section(text, "History", [_transition_line(t) for t in history] or ["(nothing yet)"])
    return text


def diagnosis_lines(diagnosis: Diagnosis) -> list[str]:
    lines = [diagnosis.one_line()]
    if diagnosis.diagnosis:
        lines.append(diagnosis.diagnosis)
    for rank, remedy in enumerate(diagnosis.remedies, 1):
        lines.append(f"{rank}. {remedy.key} ({remedy.cost}): {remedy.change}")
    return lines


def _header(job: JobRow) -> str:
    parts = [job.state, job.device or "no device", f"attempt {job.attempts}"]
    if job.returncode is not None:
        parts.append(f"exit {job.returncode}")
    elapsed = job.elapsed()
    if elapsed is not None:
        parts.append(fmt.clock(elapsed))
    return " · ".join(parts)


def _usage(job: JobRow) -> str:
    if job.fused_group:  # one process for the group: no share of it is this member's own
        return f"memory: its fused group {job.fused_group}'s (the group's line in the job table)"

    def pair(now, peak):
        latest = fmt_bytes(now, compact=True) or "-"
        return f"{latest} (peak {fmt_bytes(peak, compact=True)})" if peak else latest
    return f"RSS {pair(job.rss, job.peak_rss)} · GPU {pair(job.gpu_mem, job.peak_gpu)}"


def _transition_line(t: Transition) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(t.ts))
    change = t.new_state if t.old_state is None else f"{t.old_state} → {t.new_state}"
    return f"{when}  {change}" + (f"  {t.detail}" if t.detail else "")


def _section(text: Text, title: str, lines: list[str]) -> None:
    text.append(f"\n\n{title}\n", style="bold underline")
    text.append("\n".join(f"  {line}" for line in lines))
