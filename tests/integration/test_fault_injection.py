"""Kill random jobs and the engine at random moments over a 20-job plan, then check the invariants:
every job ends in exactly one final state, no job ran twice at once, no output directory was lost."""

import os
import random
import signal
import time

import pytest

from lat_core.front.service import EngineLock, ensure_engine, open_store
from lat_core.contract.journal import JOB_FINAL
from tests.conftest import fake_job
from tests.helpers.waits import HANG_S

CPU3 = {"id": "cpu", "label": "cpu", "slots": 3, "env": {"CUDA_VISIBLE_DEVICES": ""}}


def trainer_spans(record_log):
    """(start, end-or-None, pid) per attempt, from the fake trainer's own record."""
    spans, current = [], None
    for line in record_log.read_text().splitlines():
        kind, ts, *rest = line.split()
        if kind == "start":
            current = [float(ts), None, int(rest[0])]
            spans.append(current)
        elif kind == "end" and current:
            current[1] = float(ts)
    return spans


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.slow
def test_random_kills_of_jobs_and_engine_keep_the_invariants(tmp_path):
    rng = random.Random(1234)
    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("p", str(tmp_path / "out"), [CPU3], 0)
    jobs = [fake_job(tmp_path, f"j{i:02d}", sleep=rng.uniform(1.0, 3.0)) for i in range(20)]
    store.add_jobs(run_id, jobs)
    ensure_engine(state)
    killed_jobs = killed_engines = 0
    deadline = time.time() + HANG_S
    while store.run(run_id).state not in ("finished", "cancelled"):
        assert time.time() < deadline, "the run did not finish in time"
        time.sleep(rng.uniform(0.1, 0.6))
        action = rng.random()
        if action < 0.25 or killed_jobs < 2:  # the first two kills as soon as trainers run: a loaded
            killed_jobs += _kill_random_trainer(tmp_path, rng)  # machine once let the run end with none
        elif action < 0.50 and EngineLock(state).is_held():
            os.kill(EngineLock(state).holder().pid, signal.SIGKILL)
            killed_engines += 1
        if not EngineLock(state).is_held():
            ensure_engine(state)  # what any front end does when it finds no engine
    final = store.jobs(run_id)
    assert killed_jobs >= 2 and killed_engines >= 2, (killed_jobs, killed_engines)
    for job in final:
        assert job.state in JOB_FINAL
        history = [t.new_state for t in store.transitions(run_id, job_id=job.id)]
        finals_after_last_start = history[len(history) - history[::-1].index("running"):]
        assert sum(s in JOB_FINAL for s in finals_after_last_start) == 1, (job.key, history)
        spans = trainer_spans(tmp_path / "record" / f"{job.key}.log")
        assert len(spans) == job.attempts == 1  # never launched twice, even across engine deaths
        assert (tmp_path / "out" / job.key / "train.log").exists()
    assert not store.open_attempts(run_id)
    assert sum(j.state == "failed" for j in final) <= killed_jobs


def _kill_random_trainer(tmp_path, rng) -> int:
    logs = list((tmp_path / "record").glob("*.log")) if (tmp_path / "record").exists() else []
    running = [s[2] for log in logs for s in trainer_spans(log) if s[1] is None and alive(s[2])]
    if not running:
        return 0
    os.kill(rng.choice(running), signal.SIGKILL)
    return 1
