"""A job is its whole process tree: real runners, real trainers that leave processes behind (one of
them in its own session), a real journal; both containments (a cgroup per job, and the subreaper
fallback forced with ``LAT_CONTAINMENT=subreaper``)."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from lat_core.contract.commands import CancelJob
from lat_core.containment import ContainmentError, contain, release
from lat_core.engine.backends.local import LocalBackend
from lat_core.engine.loop import Engine
from lat_core.engine.warm import WarmStarter
from tests.conftest import ROOT, max_overlap
from tests.integration.test_engine import make_run
from tests.helpers.waits import HANG_S

TREE_TRAINER = ROOT / "tests" / "helpers" / "tree_trainer.py"
ONE_SLOT = {"id": "cpu", "label": "cpu", "slots": 1, "env": {"CUDA_VISIBLE_DEVICES": ""}}


def cgroup_possible() -> bool:
    try:
        release(contain("probe", "cgroup"))
        return True
    except ContainmentError:
        return False


@pytest.fixture(params=["cgroup", "subreaper"])
def containment(request, monkeypatch):
    if request.param == "cgroup" and not cgroup_possible():
        pytest.skip("no writable cgroup2 hierarchy here")
    monkeypatch.setenv("LAT_CONTAINMENT", request.param)
    return request.param


def tree_job(tmp_path: Path, name: str, sleep: float) -> dict:
    job_dir = tmp_path / "out" / name
    job_dir.mkdir(parents=True, exist_ok=True)
    (tmp_path / "record").mkdir(exist_ok=True)
    argv = [sys.executable, str(TREE_TRAINER), "--record", str(tmp_path / "record"), "--name", name,
            "--sleep", str(sleep)]
    return {"key": name, "suite": "t", "round": 1, "stem": name, "seed": 1, "dataset": "tiny-sst2",
            "job_dir": str(job_dir), "argv": argv, "env": {}}


def pids_of(tmp_path: Path, name: str) -> list[int]:
    return [int(p) for p in (tmp_path / "record" / f"{name}.pids").read_text().split()]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def tick_until(engine: Engine, done, timeout: float = HANG_S) -> None:
    deadline = time.time() + timeout
    while not done():
        assert time.time() < deadline, "timed out"
        engine.tick()
        time.sleep(0.05)


def drain(engine: Engine, timeout: float = HANG_S) -> None:
    deadline = time.time() + timeout
    while engine.tick():
        assert time.time() < deadline, "engine did not drain in time"
        time.sleep(0.05)


def job_span(tmp_path: Path, name: str) -> tuple[float, float]:
    """From the first to the last heartbeat of any process of the job, by their own clocks."""
    beats = [float(t) for f in (tmp_path / "record").glob(f"{name}.*.beats") for t in f.read_text().split()]
    return min(beats), max(beats)


def exit_record(job) -> dict:
    return json.loads(next((Path(job.job_dir) / ".lat").glob("attempt-*.exit.json")).read_text())


def test_what_a_job_leaves_running_is_stopped_when_it_succeeds(tmp_path, containment):
    store, run_id = make_run(tmp_path, [tree_job(tmp_path, "ok", sleep=0.3)])
    drain(Engine(store))
    job = store.jobs(run_id)[0]
    assert job.state == "succeeded", job.error
    assert not any(alive(pid) for pid in pids_of(tmp_path, "ok"))
    record = exit_record(job)
    assert record["containment"] == containment and record["stopped"] == 2
    log = (Path(job.job_dir) / "train.log").read_text()
    assert f"[lat] containment: {containment}" in log
    assert "stopped the 2 process(es) it left running" in log


def test_cancel_stops_the_whole_tree_setsid_children_included(tmp_path, containment):
    store, run_id = make_run(tmp_path, [tree_job(tmp_path, "slow", sleep=60)])
    engine = Engine(store)
    tick_until(engine, lambda: (tmp_path / "record" / "slow.pids").exists())
    job = store.jobs(run_id)[0]
    store.add_command(run_id, CancelJob(job.id))
    drain(engine)
    assert store.job(job.id).state == "cancelled"
    assert not any(alive(pid) for pid in pids_of(tmp_path, "slow"))


def test_a_killed_runner_takes_its_tree_with_it_before_the_slot_is_reused(tmp_path, containment):
    jobs = [tree_job(tmp_path, "a", sleep=60), tree_job(tmp_path, "b", sleep=60), tree_job(tmp_path, "c", sleep=0.3)]
    store, run_id = make_run(tmp_path, jobs, devices=[ONE_SLOT])
    engine = Engine(store)
    for name in ("a", "b"):  # both long jobs lose their runner; each one's tree must go before the next starts
        tick_until(engine, lambda: (tmp_path / "record" / f"{name}.pids").exists())
        time.sleep(0.3)  # let every process of the job beat a few times
        runner = next(a.pid for a in store.open_attempts(run_id))
        os.kill(runner, signal.SIGKILL)
    drain(engine)
    a, b, c = store.jobs(run_id)
    for job, name in ((a, "a"), (b, "b")):
        assert job.state == "failed"
        assert "the job's runner vanished (killed?); its 3 remaining processes were stopped" in job.error
        assert not any(alive(pid) for pid in pids_of(tmp_path, name))
        assert exit_record(job)["containment"] == containment
    assert c.state == "succeeded"
    spans = [job_span(tmp_path, name) for name in ("a", "b", "c")]
    assert max_overlap(spans) == 1, spans  # never two jobs' processes at once on a 1-slot device
    assert not any(alive(pid) for pid in pids_of(tmp_path, "c"))


def test_a_backend_declares_what_it_can_do():
    from lat_core.engine.backends.slurm import SlurmBackend

    local, slurm = LocalBackend(), SlurmBackend()
    assert local.reaps_process_tree and local.samples_local_processes and local.supports_warm_start
    assert not (local.recovers_from_queue or local.diagnoses_failures or local.submits_arrays)
    assert slurm.recovers_from_queue and slurm.diagnoses_failures and not slurm.samples_local_processes
    assert not slurm.submits_arrays and SlurmBackend(array=True).submits_arrays
    assert slurm.stop_vanished(1, None, Path("x")) is None  # the scheduler owns a Slurm job's processes


@pytest.mark.slow
def test_a_warm_started_job_is_contained_the_same_way(tmp_path, containment):
    """Forked from the real preloaded process: leftovers stopped at the end, and a killed runner's
    tree stopped by the backend."""
    starter = WarmStarter(tmp_path / "state")
    starter.ensure_started()
    try:
        deadline = time.time() + HANG_S
        while starter.status() == "starting":
            assert time.time() < deadline, "the preloaded process was not ready"
            time.sleep(0.5)
        assert starter.status() == "ready", starter.failure
        backend = LocalBackend()
        for name, sleep in (("ends", 0.3), ("killed", 60)):
            job = tree_job(tmp_path, name, sleep)
            argv = ["-m", "tests.helpers.tree_trainer", *job["argv"][2:]]
            exit_path = Path(job["job_dir"]) / ".lat" / "attempt-1.exit.json"
            launched = starter.launch([sys.executable, *argv], {}, Path(job["job_dir"]), exit_path)
            wait_for(lambda: (tmp_path / "record" / f"{name}.pids").exists())
            if name == "killed":
                os.kill(launched.pid, signal.SIGKILL)
                wait_for(lambda: not backend.is_alive(launched.pid, launched.pid_start))
                record = backend.stop_vanished(launched.pid, launched.pid_start, exit_path)
                assert record.stopped == 3, record
            wait_for(lambda: exit_path.exists())
            assert json.loads(exit_path.read_text())["containment"] == containment
            assert not any(alive(pid) for pid in pids_of(tmp_path, name))
            log = (Path(job["job_dir"]) / "train.log").read_text()
            assert "[lat] warm start: forked" in log and f"[lat] containment: {containment}" in log
    finally:
        starter.stop()


def wait_for(done, timeout: float = HANG_S) -> None:
    deadline = time.time() + timeout
    while not done():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)
