"""A journal row the engine reads every tick, damaged by hand or by a newer LAT: the engine never
crashes on it; a damaged diagnosis reads as none, a damaged saved plan stops only its own run."""

from __future__ import annotations

import sqlite3
import time

from lat_core.contract.commands import CancelRun
from lat_core.contract.states import JobState
from lat_core.engine.loop import Engine
from tests.conftest import fake_job
from tests.integration.test_engine import CPU, drain, make_run
from tests.helpers.waits import HANG_S


def _set_column(store, table: str, column: str, row_id: int, text: str) -> None:
    with sqlite3.connect(store.path) as db:
        db.execute(f"UPDATE {table} SET {column}=? WHERE id=?", (text, row_id))


def test_the_engine_runs_a_job_whose_stored_diagnosis_is_damaged(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a", sleep=0.1)])
    job_id = store.jobs(run_id)[0].id
    _set_column(store, "jobs", "diagnosis_json", job_id, '{"class": "melted", "remedies": 7}')
    drain(store)
    assert store.job(job_id).state is JobState.SUCCEEDED and store.run(run_id).state == "finished"


def test_a_run_whose_saved_plan_is_damaged_waits_with_one_reason_and_the_others_go_on(tmp_path):
    store, good = make_run(tmp_path, [fake_job(tmp_path, "a", sleep=0.1)])
    damaged = store.create_run("fuse: sometimes\n", str(tmp_path / "out"), [CPU], 0.0)
    store.add_jobs(damaged, [fake_job(tmp_path, "b", sleep=0.1)])
    engine = Engine(store)
    deadline = time.time() + HANG_S
    while store.run(good).state != "finished":
        assert time.time() < deadline, "the good run did not finish"
        engine.tick()
        time.sleep(0.05)
    errors = [t.detail for t in store.transitions(damaged) if t.new_state == "engine error"]
    assert errors == [f"JournalError: run {damaged}'s saved plan is damaged: field 'fuse': expected auto, true or "
                      "false, got str 'sometimes' (retrying with backoff)"]
    assert [j.state for j in store.jobs(damaged)] == [JobState.QUEUED]  # nothing started on a guess
    engine.close()


def test_a_run_whose_saved_plan_is_damaged_can_still_be_cancelled(tmp_path):
    store = make_run(tmp_path, [])[0]
    damaged = store.create_run("fuse: sometimes\n", str(tmp_path / "out"), [CPU], 0.0)
    store.add_jobs(damaged, [fake_job(tmp_path, "b", sleep=0.1)])
    store.add_command(damaged, CancelRun())
    drain(store)
    assert store.run(damaged).state == "cancelled" and store.jobs(damaged)[0].state == "cancelled"
