"""The engine as its own detached process: one per state dir, adopts running jobs after a crash."""

import os
import signal
import subprocess
import sys
import time


from lat_core.contract.commands import CancelRun
from lat_core.front.service import EngineLock, ensure_engine, open_store
from tests.conftest import fake_job
from tests.integration.test_engine import CPU
from tests.helpers.waits import HANG_S


def wait_for(predicate, timeout=HANG_S, what="condition"):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def engine_pid(state_dir):
    return EngineLock(state_dir).holder().pid


def test_detached_engine_drains_the_queue_and_exits(tmp_path):
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("p", str(tmp_path), [CPU], 0)
    store.add_jobs(run_id, [fake_job(tmp_path, f"j{i}", sleep=0.3) for i in range(4)])
    assert ensure_engine(state) is True
    assert ensure_engine(state) is False  # the lock is held: attach, never a second engine
    wait_for(lambda: store.run(run_id).state == "finished", what="run to finish")
    assert [j.state for j in store.jobs(run_id)] == ["succeeded"] * 4
    wait_for(lambda: not EngineLock(state).is_held(), what="engine to exit")


def test_second_engine_process_refuses(tmp_path):
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("p", str(tmp_path), [CPU], time.time() + 3600)  # keeps the engine alive
    store.add_jobs(run_id, [fake_job(tmp_path, "a")])
    ensure_engine(state)
    wait_for(lambda: EngineLock(state).is_held(), what="engine lock")
    out = subprocess.run([sys.executable, "-m", "lat_core.engine", "--state-dir", str(state)],
                         capture_output=True, text=True, timeout=HANG_S)
    assert "another engine already serves" in out.stdout
    store.add_command(run_id, CancelRun())
    wait_for(lambda: store.run(run_id).state == "cancelled", what="cancel")


def test_engine_killed_mid_run_is_restarted_and_adopts_without_double_launch(tmp_path):
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("p", str(tmp_path), [CPU], 0)
    # killed once two trainers run (a job is `running` in the journal before its launch: an engine
    # killed in between fails it, test_engine_faults.py); they run until released, whatever the load
    release = tmp_path / "release"
    store.add_jobs(run_id, [fake_job(tmp_path, f"j{i}", extra=("--wait-for", str(release))) for i in range(4)])
    ensure_engine(state)
    wait_for(lambda: len(list((tmp_path / "record").glob("*.log"))) == 2, what="two trainers running")
    os.kill(engine_pid(state), signal.SIGKILL)
    wait_for(lambda: not EngineLock(state).is_held(), what="lock release")
    running_before = {j.key for j in store.jobs(run_id) if j.state == "running"}
    assert ensure_engine(state) is True
    release.touch()
    wait_for(lambda: store.run(run_id).state == "finished", what="run to finish")
    jobs = store.jobs(run_id)
    assert [j.state for j in jobs] == ["succeeded"] * 4, [t.detail for t in store.transitions(run_id)]
    assert all(j.attempts == 1 for j in jobs)  # journal: one launch each
    for job in jobs:  # the trainers' own records: each started exactly once
        starts = (tmp_path / "record" / f"{job.key}.log").read_text().count("start ")
        assert starts == 1, job.key
    assert running_before  # the adopted jobs really were mid-flight when the engine died
