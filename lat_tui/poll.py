"""One read of everything the dashboard shows, made off the UI thread.

A fresh journal connection per read: SQLite connections belong to the thread that opened them, and
a thread worker runs in a new thread each time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from lat_core.monitor.gpu import GpuProbe, GpuSnapshot
from lat_core.monitor.host import HostSnapshot, host_snapshot
from lat_core.service import EngineLock, open_store
from lat_core.store import JobRow, RunRow
from lat_tui.tail import TailState, read_tail

HISTORY_SAMPLES = 60


@dataclass(frozen=True)
class DashboardData:
    run: RunRow
    jobs: list[JobRow]
    gpus: GpuSnapshot
    host: HostSnapshot
    engine_alive: bool
    log_lines: list[str] = field(default_factory=list)
    tail: TailState = TailState()
    commands: dict[int, dict] = field(default_factory=dict)  # the asked-about commands, by id


def read_dashboard(state_dir: Path, run_id: int, probe: GpuProbe, tail: TailState,
                   command_ids: tuple[int, ...] = ()) -> DashboardData:
    """Run, jobs, devices and the selected job's new log lines; raises LatError on journal trouble."""
    store = open_store(state_dir)
    try:
        run = store.run(run_id)
        jobs = store.jobs(run_id)
        commands = {cid: store.command(cid) for cid in command_ids}
    finally:
        store.close()
    lines, tail = read_tail(tail)
    return DashboardData(run, jobs, probe.snapshot(), host_snapshot(), EngineLock(state_dir).is_held(),
                         lines, tail, commands)


class GpuHistory:
    """The last samples of each GPU's memory use (percent of total), keyed by UUID.

    Owned by the UI thread: the poll hands a snapshot over and the handler appends it here. A GPU
    that vanishes keeps no history; one that comes back starts afresh.
    """

    def __init__(self, samples: int = HISTORY_SAMPLES):
        self.samples = samples
        self._series: dict[str, deque[float]] = {}

    def add(self, snapshot: GpuSnapshot) -> None:
        seen = set()
        for gpu in snapshot.gpus:
            seen.add(gpu.uuid)
            series = self._series.setdefault(gpu.uuid, deque(maxlen=self.samples))
            series.append(100.0 * gpu.memory_used / gpu.memory_total if gpu.memory_total else 0.0)
        for uuid in set(self._series) - seen:
            del self._series[uuid]

    def series(self, uuid: str) -> list[float]:
        return list(self._series.get(uuid, ()))
