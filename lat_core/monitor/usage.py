"""Per-job resource usage: process-tree RSS and GPU memory matched through the process tree."""

from __future__ import annotations

from dataclasses import dataclass

from lat_core.monitor.gpu import GpuSnapshot
from lat_core.monitor.host import process_tree


@dataclass(frozen=True)
class JobUsage:
    rss_bytes: int
    gpu_bytes: int


def job_usage(runner_pids: dict[int, int], gpus: GpuSnapshot) -> dict[int, JobUsage]:
    """job id -> usage, for jobs whose runner pid is known. GPU memory is attributed to a job when
    NVML lists a process of that job's tree (the trainer, or a torchrun worker) on a GPU."""
    gpu_by_pid: dict[int, int] = {}
    for gpu in gpus.gpus:
        for pid, used in gpu.processes:
            gpu_by_pid[pid] = gpu_by_pid.get(pid, 0) + used
    usage = {}
    for job_id, pid in runner_pids.items():
        rss = gpu_bytes = 0
        for proc in process_tree(pid):
            try:
                rss += proc.memory_info().rss
            except Exception:  # psutil.Error: it exited while we walked the tree
                continue
            gpu_bytes += gpu_by_pid.get(proc.pid, 0)
        usage[job_id] = JobUsage(rss, gpu_bytes)
    return usage
