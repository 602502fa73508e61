"""A requeued job's row says what is so (issue 28 item 16): while it waits, no step or loss of the
attempt it will not continue (a resume shows the checkpoint it continues from); its ``time`` is
all its attempts' together; an ended run whose job is queued again reads ``requeued``, never
``finished``. Real engine, fake-trainer processes, ``lat-tui status`` in a subprocess."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lat_core.contract.commands import RequeueJob
from lat_core.engine.loop import Engine
from lat_tui.columns import JOB_COLUMNS, Shown, row_cells
from tests.conftest import fake_job
from tests.integration.test_engine import make_run
from tests.helpers.waits import HANG_S

ONE_SLOT = {"id": "cpu", "label": "cpu", "slots": 1, "env": {}}

ROOT = Path(__file__).resolve().parents[2]


def lat(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAT_STATE_DIR": str(state)}
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", *args], capture_output=True, text=True, timeout=HANG_S,
                          env=env)


def tick_until(engine: Engine, done, timeout: float = HANG_S) -> None:
    deadline = time.time() + timeout
    while not done():
        engine.tick()
        assert time.time() < deadline, "took too long"
        time.sleep(0.05)


def cell(job, key: str) -> str:
    return row_cells(job, Shown.of([job]))[[c.key for c in JOB_COLUMNS].index(key)]


def test_a_requeued_row_shows_where_it_starts_and_time_sums_its_attempts(tmp_path):
    release = tmp_path / "release"
    jobs = [fake_job(tmp_path, "fresh", exit_code=1),
            fake_job(tmp_path, "resumed", extra=("--fail-log", "python", "--checkpoint", "--fail-before-attempt", "2")),
            fake_job(tmp_path, "blocker", extra=("--wait-for", str(release)))]  # holds the one slot meanwhile
    store, run_id = make_run(tmp_path, jobs, devices=(ONE_SLOT,))
    engine = Engine(store)
    by_key = lambda: {job.key: job for job in store.job_summaries(run_id)}  # noqa: E731
    tick_until(engine, lambda: by_key()["blocker"].state == "running")
    before = by_key()
    assert before["fresh"].state == "failed" and before["fresh"].last_step == 3
    first = store.attempts(before["fresh"].id)[0]
    store.add_command(run_id, RequeueJob(before["fresh"].id, start="fresh"))
    store.add_command(run_id, RequeueJob(before["resumed"].id, start="resume"))
    tick_until(engine, lambda: all(by_key()[k].state == "queued" for k in ("fresh", "resumed")))
    waiting = by_key()
    assert (waiting["fresh"].last_step, waiting["fresh"].last_loss) == (None, None)  # was: step 3, loss 0.67
    assert cell(waiting["fresh"], "step") == "" and cell(waiting["fresh"], "loss") == ""
    assert (waiting["resumed"].last_step, waiting["resumed"].last_loss) == (2, None)  # its checkpoint-2
    release.write_text("")
    while engine.tick():
        time.sleep(0.05)
    again = by_key()["fresh"]
    second = store.attempts(again.id)[1]
    assert again.attempts == 2 and again.earlier_s == pytest.approx(first.ended - first.launched)
    assert again.time_spent() == pytest.approx(again.earlier_s + (again.ended - again.started))
    assert store.job(again.id).earlier_s == again.earlier_s  # the whole row says the same
    assert again.time_spent() > second.ended - second.launched  # the table's time is both attempts'
    shown = json.loads(lat(tmp_path / "state", "status", "--json").stdout)
    assert [j["state"] for j in shown["jobs"]] == ["failed", "succeeded", "succeeded"]
    assert shown["jobs"][0]["time_spent"] == pytest.approx(again.time_spent())


def test_an_ended_run_with_a_job_queued_again_reads_requeued(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "once")])
    engine = Engine(store)
    while engine.tick():
        time.sleep(0.05)
    assert store.run(run_id).state == "finished" and store.run(run_id).ended
    job_id = store.jobs(run_id)[0].id
    store.add_command(run_id, RequeueJob(job_id))
    engine.tick()  # the engine takes the requeue: the run runs again, and has no end any more
    assert store.run(run_id).state == "running" and store.run(run_id).ended is None
    while engine.tick():
        time.sleep(0.05)
    # the engine queues a requeued job, then reopens its run: a table read in between
    store.set_job_state(job_id, "queued", "requeued by user")
    first_line = lat(tmp_path / "state", "status").stdout.splitlines()[0]
    assert first_line.startswith(f"run {run_id}: requeued;"), first_line  # was: finished
    from lat_tui.widgets.status import describe_run

    line = describe_run(store.run(run_id), store.job_summaries(run_id), engine_alive=False, now=time.time())
    assert "requeued" in line and "finished" not in line, line
