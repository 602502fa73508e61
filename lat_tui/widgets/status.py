"""The one-line run summary above the monitor panel and the job table."""

from __future__ import annotations

import time
from collections import Counter

from textual.widgets import Static

from lat_core.contract.rows import JobSummary, RunRow
from lat_tui import fmt
from lat_tui.widgets.quiet import set_content

STATE_ORDER = ("running", "queued", "succeeded", "failed", "cancelled", "pruned")


class RunStatus(Static):
    """``run 3 · running · 2 running 1 queued 1 succeeded``, or the countdown while it lasts."""

    def show(self, run: RunRow, jobs: list[JobSummary], engine_alive: bool) -> None:
        self.set_class(run.state == "countdown", "-countdown")
        set_content(self, describe_run(run, jobs, engine_alive, time.time()))


def describe_run(run: RunRow, jobs: list[JobSummary], engine_alive: bool, now: float) -> str:
    parts = [f"[b]run {run.id}[/b]", _run_state(run, now), _job_counts(jobs)]
    if run.paused and run.state in ("countdown", "running"):
        parts.insert(2, "[b]paused[/b] (p: resume)")
    if run.state in ("countdown", "running") and not engine_alive:
        parts.append("[b]engine not running[/b] (e: start)")
    return " · ".join(p for p in parts if p)


def _run_state(run: RunRow, now: float) -> str:
    if run.state == "countdown":
        return f"[b]starts in {fmt.clock(run.countdown_until - now)}[/b] (s: now)"
    if run.state in ("finished", "cancelled") and run.ended and run.started:
        return f"{run.state} after {fmt.clock(run.ended - run.started)}"
    return run.state


def _job_counts(jobs: list[JobSummary]) -> str:
    counts = Counter(job.state for job in jobs)
    return " ".join(f"{counts[s]} {s}" for s in STATE_ORDER if counts[s])
