"""Every way an attempt ends closes its train.log with a line of LAT's own (when, how, at which
step), so a cancelled or killed job's log never just stops (issue 28 item 13). Real engine, real
fake-trainer processes; a fused member's log is checked in test_engine_fused."""

import os
import re
import signal
import time
from pathlib import Path

from lat_core.contract.commands import CancelJob
from lat_core.contract.jobdir import JobDir, Started
from lat_core.engine.loop import Engine
from tests.conftest import fake_job
from tests.integration.test_engine import make_run
from tests.helpers.waits import HANG_S

STAMP = r"\[lat\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
CPU4 = {"id": "cpu", "label": "cpu", "slots": 4, "env": {}}


def last_line(job) -> str:
    return Path(job.job_dir, "train.log").read_text().rstrip("\n").splitlines()[-1]


def trainer_pid(job) -> int | None:
    started = JobDir(job.job_dir).read_events().of(Started)
    return started[-1].pid if started else None


def tick_until(engine: Engine, done, timeout: float = HANG_S) -> None:
    deadline = time.time() + timeout
    while not done():
        assert engine.tick() and time.time() < deadline, "the engine stopped or took too long"
        time.sleep(0.05)


def drain(engine: Engine, timeout: float = HANG_S) -> None:
    deadline = time.time() + timeout
    while engine.tick():
        assert time.time() < deadline, "the engine did not drain in time"
        time.sleep(0.05)


def test_each_end_closes_the_log_with_how_and_at_which_step(tmp_path):
    never = str(tmp_path / "never")  # a release that never comes: these run until stopped
    jobs = [fake_job(tmp_path, "ok"), fake_job(tmp_path, "exit1", exit_code=1),
            fake_job(tmp_path, "cancelled", extra=("--wait-for", never)),
            fake_job(tmp_path, "killed", extra=("--wait-for", never))]
    store, run_id = make_run(tmp_path, jobs, devices=(CPU4,))
    engine = Engine(store)
    by_key = lambda: {job.key: job for job in store.jobs(run_id)}  # noqa: E731
    tick_until(engine, lambda: all(trainer_pid(by_key()[k]) for k in ("cancelled", "killed"))
               and all(by_key()[k].last_step == 3 for k in ("cancelled", "killed")))
    store.add_command(run_id, CancelJob(by_key()["cancelled"].id))
    os.kill(trainer_pid(by_key()["killed"]), signal.SIGKILL)
    drain(engine)
    jobs_ = by_key()
    assert {k: j.state for k, j in jobs_.items()} == {"ok": "succeeded", "exit1": "failed", "cancelled": "cancelled",
                                                      "killed": "failed"}
    assert re.fullmatch(STAMP + r"succeeded at step 3: exit code 0", last_line(jobs_["ok"]))
    assert re.fullmatch(STAMP + r"failed at step 3: exit code 1: .*", last_line(jobs_["exit1"]))
    assert re.fullmatch(STAMP + r"cancelled by user at step 3: killed by SIGTERM", last_line(jobs_["cancelled"]))
    assert re.fullmatch(STAMP + r"failed at step 3: killed by SIGKILL.*", last_line(jobs_["killed"]))
    # the job row's reason still quotes the trainer's last words, not the closing line
    assert "injected failure of exit1" in jobs_["exit1"].error


def test_a_launch_that_failed_closes_the_log_too(tmp_path):
    job = fake_job(tmp_path, "unlaunchable")
    blocker = Path(job["job_dir"], ".lat", "attempt-1.exit.json")
    (blocker / "in-the-way").mkdir(parents=True)  # where the runner's exit record goes stands a folder
    store, run_id = make_run(tmp_path, [job])
    drain(Engine(store))
    (failed,) = store.jobs(run_id)
    assert failed.state == "failed" and failed.error.startswith("launch failed: "), failed.error
    assert re.fullmatch(STAMP + r"failed: launch failed: .*", last_line(failed))
