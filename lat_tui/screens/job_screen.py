"""One job in full: where it lives, its usage, its diagnosis, its env overrides and its history.

Opened with ``enter`` on the dashboard's job table. The history is the journal's transitions for
the job: state changes and the commands applied to it (cancel, requeue with a remedy, ...).
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from lat_core.errors import LatError
from lat_core.rows import JobRow, Transition
from lat_tui import fmt
from lat_tui.context import AppContext
from lat_tui.screens.controls import RunControls


class JobScreen(Screen):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("r", "requeue", "Requeue"),
        Binding("c", "cancel_job", "Cancel job"),
        Binding("f5", "reload", "Reload"),
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
        self.action_reload()

    def action_reload(self) -> None:
        try:
            job = self.context.client.job(self.job_id)
            history = self.context.client.history(job.run_id, job_id=job.id)
        except LatError as exc:
            self.query_one("#job-text", Static).update(Text(f"cannot read the journal: {exc}"))
            return
        self._job = job
        self.query_one("#job-title", Static).update(Text(f"job {job.id} · {job.key}", style="bold"))
        self.query_one("#job-text", Static).update(describe(job, history))

    def action_requeue(self) -> None:
        if self._job and self.controls.requeue(self._job):
            self.set_timer(1.0, self.action_reload)

    def action_cancel_job(self) -> None:
        if self._job and self._job.state in ("queued", "running"):
            self.controls.send_command("cancel_job", self._job.id, label=f"cancel {self._job.key}")
            self.notify(f"Cancelling {self._job.key} ...")
            self.set_timer(1.0, self.action_reload)


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


def diagnosis_lines(diagnosis: dict) -> list[str]:
    lines = [f"{diagnosis.get('class', '?')}: {diagnosis.get('title', '')}"]
    if diagnosis.get("diagnosis"):
        lines.append(diagnosis["diagnosis"])
    for rank, remedy in enumerate(diagnosis.get("remedies") or [], 1):
        lines.append(f"{rank}. {remedy.get('key')} ({remedy.get('cost', '')}): {remedy.get('change', '')}")
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
    def pair(now, peak):
        latest = fmt.size(now) or "-"
        return f"{latest} (peak {fmt.size(peak)})" if peak else latest
    return f"RSS {pair(job.rss, job.peak_rss)} · GPU {pair(job.gpu_mem, job.peak_gpu)}"


def _transition_line(t: Transition) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(t.ts))
    change = t.new_state if t.old_state is None else f"{t.old_state} → {t.new_state}"
    return f"{when}  {change}" + (f"  {t.detail}" if t.detail else "")


def _section(text: Text, title: str, lines: list[str]) -> None:
    text.append(f"\n\n{title}\n", style="bold underline")
    text.append("\n".join(f"  {line}" for line in lines))
