"""Per-job resource usage: process-tree RSS and GPU memory matched through the process tree.

One sampling pass lists the host's processes once (their parents, from one walk of /proc) and then
sums each job's tree from that table: asking each job's runner for its descendants would walk all
of /proc once per running job.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from lat_core.monitor.gpu import GpuSnapshot


@dataclass(frozen=True)
class JobUsage:
    rss_bytes: int
    gpu_bytes: int


def job_usage(runner_pids: dict[int, int], gpus: GpuSnapshot) -> dict[int, JobUsage]:
    """job id -> usage, for jobs whose runner pid is known. GPU memory is attributed to a job when
    NVML lists a process of that job's tree (the trainer, or a torchrun worker) on a GPU."""
    if not runner_pids:
        return {}
    gpu_by_pid: dict[int, int] = {}
    for gpu in gpus.gpus:
        for pid, used in gpu.processes:
            gpu_by_pid[pid] = gpu_by_pid.get(pid, 0) + used
    procs, children = process_table()
    usage = {}
    for job_id, pid in runner_pids.items():
        rss = gpu_bytes = 0
        for member in tree_pids(pid, procs, children):
            try:
                rss += procs[member].memory_info().rss
            except psutil.Error:  # it exited since the listing
                continue
            gpu_bytes += gpu_by_pid.get(member, 0)
        usage[job_id] = JobUsage(rss, gpu_bytes)
    return usage


def process_table() -> tuple[dict[int, psutil.Process], dict[int, list[int]]]:
    """(pid -> process, pid -> its children's pids) from one pass over the host's processes."""
    procs: dict[int, psutil.Process] = {}
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        procs[proc.pid] = proc
        ppid = proc.info.get("ppid")
        if ppid is not None:
            children.setdefault(ppid, []).append(proc.pid)
    return procs, children


def tree_pids(root: int, procs: dict[int, psutil.Process], children: dict[int, list[int]]) -> list[int]:
    """``root`` and all its descendants in the table; empty when ``root`` is gone."""
    if root not in procs:
        return []
    tree, todo, seen = [], [root], {root}
    while todo:
        pid = todo.pop()
        tree.append(pid)
        for child in children.get(pid, ()):
            if child not in seen:  # a pid reused mid-listing must not loop the walk
                seen.add(child)
                todo.append(child)
    return tree
