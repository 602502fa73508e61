"""A journal row the engine reads every tick, damaged by hand or by a newer LAT: the engine goes on
serving the run (it never crashes on a row)."""

from __future__ import annotations

import sqlite3

from lat_core.contract.states import JobState
from tests.conftest import fake_job
from tests.integration.test_engine import drain, make_run


def _set_column(store, table: str, column: str, row_id: int, text: str) -> None:
    with sqlite3.connect(store.path) as db:
        db.execute(f"UPDATE {table} SET {column}=? WHERE id=?", (text, row_id))


def test_the_engine_runs_a_job_whose_stored_diagnosis_is_damaged(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a", sleep=0.1)])
    job_id = store.jobs(run_id)[0].id
    _set_column(store, "jobs", "diagnosis_json", job_id, '{"class": "melted", "remedies": 7}')
    drain(store)
    assert store.job(job_id).state is JobState.SUCCEEDED and store.run(run_id).state == "finished"
