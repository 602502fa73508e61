"""One read of everything the dashboard shows, made off the UI thread.

A fresh journal connection per read: SQLite connections belong to the thread that opened them, and
a thread worker runs in a new thread each time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import psutil

from lat_core.monitor.gpu import GpuProbe, GpuSnapshot
from lat_core.service import EngineLock, open_store
from lat_core.store import JobRow, RunRow
from lat_tui.tail import TailState, read_tail


@dataclass(frozen=True)
class HostMemory:
    used: int
    total: int


@dataclass(frozen=True)
class DashboardData:
    run: RunRow
    jobs: list[JobRow]
    gpus: GpuSnapshot
    memory: HostMemory
    engine_alive: bool
    log_lines: list[str] = field(default_factory=list)
    tail: TailState = TailState()


def read_dashboard(state_dir: Path, run_id: int, probe: GpuProbe, tail: TailState) -> DashboardData:
    """Run, jobs, devices and the selected job's new log lines; raises LatError on journal trouble."""
    store = open_store(state_dir)
    try:
        run = store.run(run_id)
        jobs = store.jobs(run_id)
    finally:
        store.close()
    lines, tail = read_tail(tail)
    return DashboardData(run, jobs, probe.snapshot(), host_memory(), EngineLock(state_dir).is_held(), lines, tail)


def host_memory() -> HostMemory:
    mem = psutil.virtual_memory()
    return HostMemory(mem.total - mem.available, mem.total)
