"""One read of everything the dashboard shows, made off the UI thread (the client keeps one journal
connection per thread)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import psutil

from lat_core.front.client import (JOB_FINAL, Client, CommandRow, GpuProbe, GpuSnapshot, HostSnapshot, host_snapshot,
                                   job_log_path)
from lat_core.contract.rows import GroupUsage, JobSummary, RunRow
from lat_tui.tail import TailState, read_tail

HISTORY_SAMPLES = 60


@dataclass(frozen=True)
class DashboardData:
    run: RunRow
    jobs: list[JobSummary]
    gpus: GpuSnapshot
    host: HostSnapshot
    engine_alive: bool
    log_lines: list[str] = field(default_factory=list)
    tail: TailState = TailState()
    commands: dict[int, CommandRow] = field(default_factory=dict)  # the asked-about commands, by id
    cpu_percent: tuple[float, ...] = ()  # per core, since the previous poll
    families: dict[int, str] = field(default_factory=dict)  # job id -> model family, where known
    groups: dict[str, GroupUsage] = field(default_factory=dict)  # the run's fused groups, by id
    pause_reason: str = ""  # why the run's admission is paused; "" when it is not


def read_dashboard(client: Client, run_id: int, probe: GpuProbe, tail: TailState,
                   command_ids: tuple[int, ...] = ()) -> DashboardData:
    """Run, jobs, devices and the selected job's new log lines; raises LatError on journal trouble."""
    try:
        run = client.run(run_id)
        jobs = client.job_table(run_id)
        commands = {cid: client.command(cid) for cid in command_ids}
        families = client.model_families(jobs)
        groups = client.fused_groups(run_id)
        pause_reason = client.pause_reason(run_id) if run.paused else ""
    finally:
        client.close()  # a worker thread per poll: its connection ends with the read
    lines, tail = read_tail(tail, ended=_tailed_job_ended(jobs, tail))
    return DashboardData(run, jobs, probe.snapshot(), host_snapshot(), client.engine_alive(),
                         lines, tail, commands, cpu_percent(), families, groups, pause_reason)


def cpu_percent() -> tuple[float, ...]:
    """Each core's busy percent since the previous call (the first call's are 0): the monitor's
    view of a machine without GPUs, where the jobs run on these cores."""
    return tuple(psutil.cpu_percent(percpu=True))


def _tailed_job_ended(jobs: list[JobSummary], tail: TailState) -> bool:
    return tail.path is not None and any(
        job.state in JOB_FINAL and job_log_path(job.job_dir) == tail.path for job in jobs)


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
