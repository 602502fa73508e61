"""One-line summaries above the job table: the run, and the devices it runs on."""

from __future__ import annotations

import time
from collections import Counter

from textual.widgets import Static

from lat_core.monitor.gpu import GpuSnapshot
from lat_core.store import JobRow, RunRow
from lat_tui import fmt
from lat_tui.poll import HostMemory

STATE_ORDER = ("running", "queued", "succeeded", "failed", "cancelled")


class RunStatus(Static):
    """``run 3 · running · 2 running 1 queued 1 succeeded``, or the countdown while it lasts."""

    def show(self, run: RunRow, jobs: list[JobRow], engine_alive: bool) -> None:
        self.set_class(run.state == "countdown", "-countdown")
        self.update(describe_run(run, jobs, engine_alive, time.time()))


def describe_run(run: RunRow, jobs: list[JobRow], engine_alive: bool, now: float) -> str:
    parts = [f"[b]run {run.id}[/b]", _run_state(run, now), _job_counts(jobs)]
    if run.state in ("countdown", "running") and not engine_alive:
        parts.append("[b]engine not running[/b] (e: start)")
    return " · ".join(p for p in parts if p)


def _run_state(run: RunRow, now: float) -> str:
    if run.state == "countdown":
        return f"[b]starts in {fmt.clock(run.countdown_until - now)}[/b] (s: now)"
    if run.state in ("finished", "cancelled") and run.ended and run.started:
        return f"{run.state} after {fmt.clock(run.ended - run.started)}"
    return run.state


def _job_counts(jobs: list[JobRow]) -> str:
    counts = Counter(job.state for job in jobs)
    return " ".join(f"{counts[s]} {s}" for s in STATE_ORDER if counts[s])


class DeviceBar(Static):
    """GPU memory and utilisation per GPU, then host RAM, in one line."""

    def show(self, gpus: GpuSnapshot, memory: HostMemory) -> None:
        self.update(describe_devices(gpus, memory))


def describe_devices(gpus: GpuSnapshot, memory: HostMemory) -> str:
    parts = [_gpu_text(gpu) for gpu in gpus.gpus] or [f"[dim]{gpus.reason or 'no GPU'}[/dim]"]
    parts.append(f"RAM {fmt.gib(memory.used, memory.total)}")
    return " │ ".join(parts)


def _gpu_text(gpu) -> str:
    util = "" if gpu.utilization is None else f" {gpu.utilization}%"
    return f"GPU{gpu.index} {fmt.gib(gpu.memory_used, gpu.memory_total)}{util}"
