"""Per-job resource usage: process-tree RSS and GPU memory matched through the process tree.

This is the one definition of a job's memory (the journal's rss/peak_rss, which status, show, the
TUI, ``--json`` and, through the job folder's usage.json, the results tables all show): the resident
memory of the trainer's process tree, less what a warm-started trainer inherited from the preloaded
process when it was forked (those pages are the preloaded process's, shared, not the job's).
The members of a fused group have one tree, the group's process: the engine records its usage for
the group (the journal's fused_groups), never as a share of it per member.

One sampling pass lists the host's processes once (their parents, from one walk of /proc) and then
sums each job's tree from that table: asking each job's runner for its descendants would walk all
of /proc once per running job. Memory is read only for the members of the jobs' trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import os

import psutil

from lat_core.monitor.gpu import GpuSnapshot


@dataclass(frozen=True)
class JobUsage:
    rss_bytes: int
    gpu_bytes: int


def job_usage(runner_pids: dict[int, int], gpus: GpuSnapshot, inherited: dict[int, int] | None = None
              ) -> dict[int, JobUsage]:
    """job id -> usage, for jobs whose runner pid is known. GPU memory is attributed to a job when
    NVML lists a process of that job's tree (the trainer, or a torchrun worker) on a GPU.
    ``inherited``: job id -> the resident bytes its trainer had when forked (not counted)."""
    inherited = inherited or {}
    if not runner_pids:
        return {}
    gpu_by_pid: dict[int, int] = {}
    for gpu in gpus.gpus:
        for pid, used in gpu.processes:
            gpu_by_pid[pid] = gpu_by_pid.get(pid, 0) + used
    parents = parent_pids()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    usage = {}
    for job_id, pid in runner_pids.items():
        rss = gpu_bytes = 0
        for member in tree_pids(pid, parents, children):
            try:
                rss += psutil.Process(member).memory_info().rss
            except psutil.Error:  # it exited since the listing
                continue
            gpu_bytes += gpu_by_pid.get(member, 0)
        usage[job_id] = JobUsage(max(rss - inherited.get(job_id, 0), 0), gpu_bytes)
    return usage


def parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process on the host: one read of ``/proc/<pid>/stat`` each where
    there is a /proc (psutil's listing costs several reads per process), else psutil's."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {p.pid: p.info["ppid"] for p in psutil.process_iter(["ppid"]) if p.info.get("ppid") is not None}
    parents = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # it exited since the listing
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        parents[int(name)] = int(stat[stat.rfind(b")") + 1:].split(maxsplit=2)[1])
    return parents


def tree_pids(root: int, parents: dict[int, int], children: dict[int, list[int]]) -> list[int]:
    """``root`` and all its descendants in the table; empty when ``root`` is gone."""
    if root not in parents:
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
