"""The run summary above the monitor panel and the job table: one line, and a second one saying
why admission is paused when something other than the user paused it (the circuit breaker, a full
disk): a paused run with no word of why reads as a hung one."""

from __future__ import annotations

import time
from collections import Counter

from rich.markup import escape

from textual.widgets import Static

from lat_core.contract.rows import JobSummary, RunRow
from lat_core.front.client import PAUSED_BY_USER
from lat_tui import fmt
from lat_tui.columns import run_state_text
from lat_tui.widgets.quiet import set_content

STATE_ORDER = ("running", "queued", "succeeded", "failed", "cancelled")
PAUSABLE = ("countdown", "running")


class RunStatus(Static):
    """``run 3 · running · 2 running 1 queued 1 succeeded``, or the countdown while it lasts;
    ``pause_reason``: the journal's reason for the run's pause (read only while it is paused)."""

    def show(self, run: RunRow, jobs: list[JobSummary], engine_alive: bool, pause_reason: str = "") -> None:
        self.set_class(run.state == "countdown", "-countdown")
        why = paused_why(run, pause_reason)
        self.set_class(bool(why), "-paused-why")
        text = describe_run(run, jobs, engine_alive, time.time())
        set_content(self, f"{text}\n[b]why paused:[/b] {escape(why)}" if why else text)


def describe_run(run: RunRow, jobs: list[JobSummary], engine_alive: bool, now: float) -> str:
    parts = [f"[b]run {run.id}[/b]", _run_state(run, jobs, now), _job_counts(jobs)]
    if run.paused and run.state in PAUSABLE:
        parts.insert(2, "[b]paused[/b] (p: resume)")
    if run.state in PAUSABLE and not engine_alive:
        parts.append("[b]engine not running[/b] (e: start)")
    return " · ".join(p for p in parts if p)


def paused_why(run: RunRow, pause_reason: str) -> str:
    """The reason of a pause the user did not ask for; "" for theirs, or a run not paused."""
    if not (run.paused and run.state in PAUSABLE) or pause_reason in ("", PAUSED_BY_USER):
        return ""
    return pause_reason


def _run_state(run: RunRow, jobs: list[JobSummary], now: float) -> str:
    state = run_state_text(run, jobs)
    if state == "countdown":
        return f"[b]starts in {fmt.clock(run.countdown_until - now)}[/b] (s: now)"
    if state in ("finished", "cancelled") and run.ended and run.started:
        return f"{state} after {fmt.clock(run.ended - run.started)}"
    return state


def _job_counts(jobs: list[JobSummary]) -> str:
    counts = Counter(job.state for job in jobs)
    return " ".join(f"{counts[s]} {s}" for s in STATE_ORDER if counts[s])
