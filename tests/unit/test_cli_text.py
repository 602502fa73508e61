"""Plain-text pieces of the CLI: the killed job's reason apart from its log's last line, the
summary of a re-run whose jobs had succeeded before, the shared job table."""

import io
import re

from lat_core.front.client import Client
from lat_core.front.service import open_store
from lat_tui.columns import JOB_COLUMNS, plain_table
from lat_tui.headless import summarize
from lat_tui.status import job_notes


def job_record(tmp_path, key, state="queued"):
    return {"key": key, "suite": "s", "round": 1, "stem": key, "seed": 1, "dataset": "d",
            "job_dir": str(tmp_path / key), "argv": ["x"], "env": {}, "state": state}


def test_a_killed_jobs_reason_and_its_last_log_line_are_two_lines(tmp_path):
    store = open_store(tmp_path / "state")
    run_id = store.create_run("p", str(tmp_path), [{"id": "cpu", "slots": 1, "env": {}}], 0)
    (job_id,) = store.add_jobs(run_id, [job_record(tmp_path, "k")])
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "train.log").write_text("loading\nstep 305/400 loss 2.6676\n")
    error = "killed by SIGKILL: killed: Killed by SIGKILL: step 305/400 loss 2.6676"
    store.set_job_state(job_id, "failed", error, error=error)
    assert job_notes(store.job(job_id)) == ["killed by SIGKILL: killed: Killed by SIGKILL",
                                            "last log line: step 305/400 loss 2.6676"]
    other = "exit code 1: python_exception: RuntimeError: boom"  # triage named the cause: one line
    store.set_job_state(job_id, "failed", other, error=other)
    assert job_notes(store.job(job_id)) == [other]


def test_a_rerun_whose_jobs_succeeded_before_says_so(tmp_path):
    store = open_store(tmp_path / "state")
    run_id = store.create_run("p", str(tmp_path), [{"id": "cpu", "slots": 1, "env": {}}], 0)
    store.add_jobs(run_id, [job_record(tmp_path, "a", "succeeded"), job_record(tmp_path, "b", "succeeded")])
    out = io.StringIO()
    assert summarize(Client(tmp_path / "state"), run_id, out) == 0
    text = out.getvalue()
    assert "2/2 jobs succeeded (2 had succeeded in an earlier run and were not rerun" in text
    table = text.strip().splitlines()[:3]
    assert table[0].split() == [c.header for c in JOB_COLUMNS]
    assert all(len(cells(row)) == len(JOB_COLUMNS) for row in table)  # no empty column: "-" fills


def test_plain_table_has_the_job_id_first(tmp_path):
    store = open_store(tmp_path / "state")
    run_id = store.create_run("p", str(tmp_path), [{"id": "cpu", "slots": 1, "env": {}}], 0)
    ids = store.add_jobs(run_id, [job_record(tmp_path, "a")])
    assert cells(plain_table(store.jobs(run_id)).splitlines()[1])[:3] == [str(ids[0]), "a 1:d", "queued"]


def cells(row: str) -> list[str]:
    """A plain table's row split at its column gaps (two spaces or more; a job's name has one)."""
    return re.split(r" {2,}", row.strip())


def test_json_views_round_trip_and_take_enum_states(tmp_path):
    import enum
    import json
    from dataclasses import replace

    from lat_tui.json_views import JobView, dumps, from_json, job_view

    class State(str, enum.Enum):  # the core may hand states as str-valued Enums
        RUNNING = "running"

    store = open_store(tmp_path / "state")
    run_id = store.create_run("p", str(tmp_path), [{"id": "cpu", "slots": 1, "env": {}}], 0)
    store.add_jobs(run_id, [job_record(tmp_path, "a")])
    job = replace(store.jobs(run_id)[0], state=State.RUNNING, started=100.0, last_loss=0.5, last_step=2)
    view = job_view(job, now=160.0)
    document = json.loads(dumps({"job": view}))
    assert document["schema"] == 1 and document["job"]["state"] == "running"
    assert from_json(JobView, document["job"]) == view and view.elapsed == 60.0


def test_a_requeued_job_shows_no_clock_while_it_waits(tmp_path):
    """Its last attempt's start stays in the journal; the time column ticked on from it (02:30 for a
    job queued again)."""
    import time

    store = open_store(tmp_path / "state")
    run_id = store.create_run("p", str(tmp_path), [{"id": "cpu", "slots": 1, "env": {}}], 0)
    (job_id,) = store.add_jobs(run_id, [job_record(tmp_path, "a")])
    store.set_job_state(job_id, "queued", started=time.time() - 150, attempts=1)
    row = cells(plain_table(store.jobs(run_id)).splitlines()[1])
    assert row[2] == "queued" and row[4] == "-"
