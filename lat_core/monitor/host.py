"""Host probe through psutil: RAM, swap, load, and each job's process-tree RSS.

A job's RSS is the sum over its runner and every descendant (trainer, dataloader workers), since
the kernel's OOM killer and the user's RAM budget see all of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostSnapshot:
    ram_total: int
    ram_used: int
    ram_available: int
    swap_total: int
    swap_used: int
    load1: float
    cpu_count: int


def host_snapshot() -> HostSnapshot:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return HostSnapshot(
        ram_total=vm.total, ram_used=vm.total - vm.available, ram_available=vm.available,
        swap_total=swap.total, swap_used=swap.used, load1=os.getloadavg()[0], cpu_count=psutil.cpu_count() or 1,
    )


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants; empty when it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss(pid: int) -> int:
    total = 0
    for proc in process_tree(pid):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue  # exited between listing and reading
    return total
