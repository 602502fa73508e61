"""``on_failure``: transient failure classes retried after a backoff, resuming from a checkpoint when
there is one, every retry in the job's history; other classes are left failed (real processes)."""

import json
from pathlib import Path

import pytest

from tests.conftest import fake_job
from tests.integration.test_engine import CPU, drain, make_run

ON_FAILURE = "on_failure: {classes: [rendezvous], max_retries: 2, backoff_s: 2}\n"


def run_with_plan(tmp_path, job, plan=ON_FAILURE):
    store, run_id = make_run(tmp_path, [job], devices=[{**CPU, "slots": 1}])
    store._db.execute("UPDATE runs SET plan_yaml=? WHERE id=?", (plan, run_id))
    drain(store)
    return store, run_id, store.jobs(run_id)[0]


def history(store, run_id, job_id) -> list[tuple[str, str]]:
    return [(t.new_state, t.detail) for t in store.transitions(run_id, job_id=job_id)]


@pytest.mark.slow
def test_a_port_clash_is_retried_after_the_backoff_and_resumes(tmp_path):
    job = fake_job(tmp_path, "ddp", sleep=0.1, extra=("--fail-log", "port_in_use", "--fail-before-attempt", "2",
                                                     "--checkpoint", "--echo"))
    store, run_id, final = run_with_plan(tmp_path, job)
    assert final.state == "succeeded" and final.attempts == 2
    first, second = store.attempts(final.id)
    assert second.launched - first.ended >= 2.0  # held queued until the backoff had passed
    retries = [d for s, d in history(store, run_id, final.id) if s == "queued" and d.startswith("auto-retry")]
    assert retries == ["auto-retry after rendezvous (1/2): in 2s, resuming from its last checkpoint"]
    events = [json.loads(line) for line in (Path(final.job_dir) / "events.jsonl").read_text().splitlines()]
    assert [e["resumed"] for e in events if e["event"] == "echo"] == [False, True]


@pytest.mark.slow
def test_a_crash_mid_save_is_retried_from_the_start_not_resumed(tmp_path):
    """checkpoint-4 without trainer_state.json (the save crashed): the retry starts fresh and succeeds
    where --resume would be refused by the trainer."""
    job = fake_job(tmp_path, "midsave", sleep=0.1, extra=("--fail-log", "port_in_use", "--fail-before-attempt", "2",
                                                          "--half-checkpoint", "--like-trainer", "--echo"))
    store, run_id, final = run_with_plan(tmp_path, job, ON_FAILURE.replace("backoff_s: 2", "backoff_s: 0"))
    assert final.state == "succeeded" and final.attempts == 2, final.error
    retries = [d for s, d in history(store, run_id, final.id) if s == "queued" and d.startswith("auto-retry")]
    assert retries == ["auto-retry after rendezvous (1/2): in 0s, from the start"]
    assert "--resume" not in final.argv


@pytest.mark.slow
def test_retries_stop_at_max_retries(tmp_path):
    job = fake_job(tmp_path, "clash", sleep=0.1, extra=("--fail-log", "port_in_use"))
    plan = ON_FAILURE.replace("max_retries: 2", "max_retries: 1").replace("backoff_s: 2", "backoff_s: 0")
    store, run_id, final = run_with_plan(tmp_path, job, plan)
    assert final.state == "failed" and final.attempts == 2 and final.diagnosis.cls == "rendezvous"
    assert "--resume" not in final.argv  # no checkpoint: retried from the start


@pytest.mark.slow
def test_a_class_not_listed_is_not_retried(tmp_path):
    job = fake_job(tmp_path, "bug", sleep=0.1, extra=("--fail-log", "python", "--fail-before-attempt", "2"))
    store, run_id, final = run_with_plan(tmp_path, job)
    assert final.state == "failed" and final.attempts == 1 and final.diagnosis.cls == "python_exception"
    assert not [d for _, d in history(store, run_id, final.id) if d.startswith("auto-retry")]
