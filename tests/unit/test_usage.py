"""Per-job usage from one process listing: each job's whole tree, GPU memory of any of its members."""

import os
import subprocess
import sys
import time

import psutil

from lat_core.monitor.gpu import GpuInfo, GpuSnapshot
from lat_core.monitor.usage import job_usage, parent_pids
from tests.helpers.waits import HANG_S

# a runner that starts a child (its "trainer") holding ~64 MiB, then waits
PARENT = ("import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', "
          "'import time; b = bytearray(64 << 20); time.sleep(60)']); c.wait()")


def wait_for_child(pid: int) -> int:
    deadline = time.time() + HANG_S
    while time.time() < deadline:
        kids = psutil.Process(pid).children()
        if kids and kids[0].memory_info().rss > 64 << 20:
            return kids[0].pid
        time.sleep(0.05)
    raise AssertionError("the child never started")


def kill_tree(runner: subprocess.Popen) -> None:
    """The runner and every process under it, killed and reaped."""
    for child in psutil.Process(runner.pid).children(recursive=True):
        child.kill()
    runner.kill()
    runner.wait()


def test_each_job_sums_its_own_tree_and_gpu_memory_of_its_members():
    trees = [subprocess.Popen([sys.executable, "-c", PARENT]) for _ in range(2)]
    try:
        children = [wait_for_child(p.pid) for p in trees]
        gpus = GpuSnapshot((GpuInfo(0, "GPU-0", "test", 0, 1 << 40, processes=((children[1], 5 << 30),)),))
        usage = job_usage({10: trees[0].pid, 11: trees[1].pid, 12: 2**22 + 1}, gpus)  # 12: a pid that is gone
        own = {job: sum(psutil.Process(p).memory_info().rss for p in (t.pid, c))
               for job, t, c in zip((10, 11), trees, children)}
        for job in (10, 11):
            assert usage[job].rss_bytes >= (64 << 20)  # the child's memory counts for its job
            assert abs(usage[job].rss_bytes - own[job]) < (8 << 20)  # and nothing of the other tree's
        assert (usage[10].gpu_bytes, usage[11].gpu_bytes) == (0, 5 << 30)
        assert usage[12].rss_bytes == usage[12].gpu_bytes == 0
    finally:
        for p in trees:
            kill_tree(p)


def test_no_jobs_gives_no_usage():
    assert job_usage({}, GpuSnapshot(())) == {}


def test_without_proc_the_parents_come_from_psutil(monkeypatch):
    # A tree of our own (this test -> runner -> its child): other processes on a busy machine may exit or be
    # reparented between two listings, these two stay put while the test holds them.
    runner = subprocess.Popen([sys.executable, "-c", PARENT])
    try:
        child = wait_for_child(runner.pid)
        from_proc = parent_pids()
        real_listdir = os.listdir
        monkeypatch.setattr(os, "listdir", lambda path: (_ for _ in ()).throw(OSError("no /proc"))
                            if path == "/proc" else real_listdir(path))
        from_psutil = parent_pids()
        for parents in (from_proc, from_psutil):
            assert parents[os.getpid()] == os.getppid()
            assert parents[runner.pid] == os.getpid() and parents[child] == runner.pid
        assert len(set(from_proc) & set(from_psutil)) > 3   # the whole host, not only our tree
    finally:
        kill_tree(runner)


def test_a_forked_trainers_inherited_memory_is_not_counted():
    tree = subprocess.Popen([sys.executable, "-c", PARENT])
    try:
        wait_for_child(tree.pid)
        whole = job_usage({1: tree.pid}, GpuSnapshot(()))[1].rss_bytes
        inherited = 48 << 20
        less = job_usage({1: tree.pid}, GpuSnapshot(()), inherited={1: inherited})[1].rss_bytes
        assert abs(whole - inherited - less) < (8 << 20)  # the tree's memory less what it had at fork
        assert job_usage({1: tree.pid}, GpuSnapshot(()), inherited={1: whole * 2})[1].rss_bytes == 0
    finally:
        kill_tree(tree)
