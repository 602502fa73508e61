"""A real host OOM kill: the job runs in a memory-limited cgroup and the kernel kills it.

Skipped with the reason where this machine does not let us create a memory cgroup."""

import sys
import uuid
from pathlib import Path

import pytest

from lat_core.engine.launch import launch
from tests.integration.test_engine import CPU, drain, make_run

HOG = "import time\nx = []\nfor _ in range(100):\n    x.append(bytearray(16 * 2**20)); time.sleep(0.01)\n"
LIMIT = 96 * 2**20


def memory_cgroup() -> Path | None:
    """A fresh limited memory cgroup (v2 or v1), or None when we may not create one."""
    name = f"lat-test-{uuid.uuid4().hex[:8]}"
    for parent, limit_file in ((Path("/sys/fs/cgroup"), "memory.max"), (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes")):
        if not (parent / "cgroup.procs").exists() or (limit_file == "memory.max" and not (parent / "cgroup.subtree_control").exists()):
            continue
        try:
            (parent / name).mkdir()
            (parent / name / limit_file).write_text(str(LIMIT))
            return parent / name
        except OSError:
            continue
    return None


@pytest.fixture
def cgroup():
    group = memory_cgroup()
    if group is None:
        pytest.skip("cannot create a memory-limited cgroup here (needs root and a writable cgroup fs)")
    yield group
    try:
        group.rmdir()
    except OSError:
        pass


def test_kernel_oom_kill_is_classified_as_host_oom(tmp_path, cgroup):
    job_dir = tmp_path / "out" / "hog"
    job_dir.mkdir(parents=True)
    (job_dir / "hog.py").write_text(HOG)
    job = {"key": "hog", "suite": "t", "round": 1, "stem": "hog", "seed": 1, "dataset": "tiny-sst2",
           "job_dir": str(job_dir), "argv": [sys.executable, str(job_dir / "hog.py")], "env": {}}
    store, run_id = make_run(tmp_path, [job], devices=[CPU])

    def launch_in_cgroup(*args, **kwargs):
        launched = launch(*args, **kwargs)
        (cgroup / "cgroup.procs").write_text(str(launched.pid))  # the runner, before it starts the hog
        return launched

    drain(store, launch_fn=launch_in_cgroup)
    failed = store.jobs(run_id)[0]
    assert failed.state == "failed" and failed.returncode == -9
    assert failed.diagnosis.cls == "host_oom", failed.diagnosis
    assert "host_oom" in failed.error
    keys = [r.key for r in failed.diagnosis.remedies]
    assert keys  # ranked remedies are offered
