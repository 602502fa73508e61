"""The containment record and the job cgroup's OOM counter cross files (pid file, exit record): each
is read back by the side that did not write it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lat_core.containment import (Containment, ContainmentError, cgroup2_mount, contain, job_oom_kills, members,
                                  release)
from lat_core.engine.launch import read_containment
from lat_core.contract.jobdir import AttemptFiles, ExitRecord, OomKills, PidRecord
from lat_core.triage.hostoom import oom_kill_readings
from tests.helpers.waits import HANG_S


@pytest.mark.parametrize("containment", [
    Containment("cgroup", "ab" * 16, "/sys/fs/cgroup/lat-job3-a1-abababab"),
    Containment("subreaper", "cd" * 16, None, "no cgroup: [Errno 30] Read-only file system"),
])
def test_the_runner_pid_files_containment_reads_back_the_same(tmp_path, containment):
    exit_path = tmp_path / "attempt-1.exit.json"
    AttemptFiles(exit_path).write_pid(PidRecord(1, 2.0, containment=containment.to_json()))
    assert read_containment(exit_path) == containment


def test_no_or_foreign_containment_reads_as_none(tmp_path):
    assert read_containment(tmp_path / "missing.exit.json") is None
    assert Containment.from_json({"kind": "docker"}) is None and Containment.from_json(None) is None


def test_an_unknown_mode_is_an_error_naming_the_variable():
    with pytest.raises(ContainmentError, match="LAT_CONTAINMENT='bogus'"):
        contain("t", "bogus")


def test_the_runner_refuses_an_unknown_mode_and_starts_nothing(tmp_path):
    exit_file, touched = tmp_path / "x.exit.json", tmp_path / "ran"
    out = subprocess.run([sys.executable, "-m", "lat_core.runner", "--exit-file", str(exit_file), "--",
                          "touch", str(touched)], env={**os.environ, "LAT_CONTAINMENT": "bogus"},
                         capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 2 and not touched.exists()
    record = AttemptFiles(exit_file).read_exit()
    assert record.returncode == 2 and "LAT_CONTAINMENT='bogus'" in record.why
    assert "cannot contain the job" in out.stdout


def test_the_job_cgroups_oom_count_in_the_exit_record_is_what_triage_uses(tmp_path):
    group = tmp_path / "lat-job1-a1"
    group.mkdir()
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n")
    exit_path = tmp_path / "attempt-1.exit.json"
    AttemptFiles(exit_path).write_exit(ExitRecord(-9, oom_kills=job_oom_kills(Containment("cgroup", "t", str(group)))))
    record = AttemptFiles(exit_path).read_exit()
    assert record.oom_kills == OomKills(f"cgroup2:{group / 'memory.events'}", 2)
    assert oom_kill_readings(record.oom_kills, "vmstat", 40, root=tmp_path) == (0, 2)  # the job's own, not the host's


def test_without_the_jobs_own_counter_triage_rereads_the_launch_time_source(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "vmstat").write_text("pgfault 9\noom_kill 43\n")
    no_memory_controller = Containment("cgroup", "t", str(tmp_path))
    assert job_oom_kills(no_memory_controller) is None
    assert oom_kill_readings(None, "vmstat", 40, root=tmp_path) == (40, 43)
    assert oom_kill_readings(None, None, None, root=tmp_path) == (None, None)


def test_the_cgroup2_mount_is_found_on_hybrid_and_unified_hosts(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
                      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    assert cgroup2_mount(mounts) == Path("/sys/fs/cgroup/unified")
    mounts.write_text("cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n")
    assert cgroup2_mount(mounts) == Path("/sys/fs/cgroup")
    mounts.write_text("proc /proc proc rw 0 0\n")
    assert cgroup2_mount(mounts) is None


def test_a_record_saying_cgroup_without_a_folder_is_looked_at_as_a_process_tree():
    """A damaged or hand-written pid file (kind cgroup, no folder) must not crash the engine that
    stops the job: there is no cgroup to read, so the runner's descendants are the job."""
    damaged = Containment.from_json({"kind": "cgroup", "token": "t", "cgroup": None})
    assert damaged is not None and damaged.cgroup_dir() is None
    assert os.getpid() not in {p.pid for p in members(damaged, os.getpid())}  # read as a tree, no crash
    release(damaged)  # nothing to remove, no error
    assert Containment("cgroup", "t", "/sys/fs/cgroup/x").cgroup_dir() == Path("/sys/fs/cgroup/x")
    assert Containment("subreaper", "t", "/sys/fs/cgroup/x").cgroup_dir() is None
