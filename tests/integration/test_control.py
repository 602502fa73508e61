"""Commands through the journal, observed in the journal and in process state (real subprocesses)."""

import json
import sqlite3
import time

import yaml

from lat_core.contract.commands import (AddJobs, CancelJob, CancelRun, ExtendCountdown, PauseRun, RequeueJob,
                                        RequeueJobs, ResumeRun, SetSlots, SkipCountdown)
from lat_core.contract.diagnosis import Diagnosis
from lat_core.contract.journal import Store
from lat_core.engine.loop import Engine
from lat_core.front.client import Client
from lat_tui.control_cli import main as control_main
from tests.conftest import fake_job, intervals, max_overlap
from tests.integration.test_engine import CPU, drain, make_run
from tests.helpers.waits import HANG_S


def tick_until(engine, predicate, timeout=HANG_S):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, "timed out"
        engine.tick()
        time.sleep(0.05)


def started(tmp_path):
    return set(intervals_started(tmp_path))


def intervals_started(tmp_path):
    return [p.stem for p in (tmp_path / "record").glob("*.log")] if (tmp_path / "record").exists() else []


def job_history(store, run_id, job_id):
    return [(t.new_state, t.detail) for t in store.transitions(run_id, job_id=job_id)]


def raw_command(store, run_id, verb, args_json="{}", job_id=None):
    """A commands row as no front end of this LAT writes it (by hand, another version, damage)."""
    with sqlite3.connect(store.path) as db:
        db.execute("INSERT INTO commands (ts, run_id, job_id, verb, args_json) VALUES (?,?,?,?,?)",
                   (time.time(), run_id, job_id, verb, args_json))


def test_pause_stops_admission_and_resume_restarts_it(tmp_path):
    cpu1 = {**CPU, "slots": 1}
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, f"j{i}", sleep=0.5) for i in range(3)], devices=[cpu1])
    engine = Engine(store)
    tick_until(engine, lambda: "j0" in started(tmp_path))
    store.add_command(run_id, PauseRun())
    tick_until(engine, lambda: store.jobs(run_id)[0].state == "succeeded")
    for _ in range(20):  # a second of paused ticks: nothing new may start
        engine.tick()
        time.sleep(0.05)
    assert started(tmp_path) == {"j0"}
    assert [j.state for j in store.jobs(run_id)][1:] == ["queued", "queued"]
    store.add_command(run_id, ResumeRun())
    drain(store)
    assert [j.state for j in store.jobs(run_id)] == ["succeeded"] * 3
    run_events = [t.new_state for t in store.transitions(run_id) if t.job_id is None]
    assert {"paused", "resumed", "command:pause", "command:resume"} <= set(run_events)


def test_slot_change_mid_run_raises_concurrency(tmp_path):
    cpu1 = {**CPU, "slots": 1}
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, f"j{i}", sleep=1.2) for i in range(6)], devices=[cpu1])
    engine = Engine(store)
    tick_until(engine, lambda: "j0" in started(tmp_path))
    store.add_command(run_id, SetSlots("cpu", 3))
    store.add_command(run_id, SetSlots("gpu7", 3))  # no such device: rejected
    drain(store)
    assert max_overlap(intervals(tmp_path).values()) == 3
    assert store.run(run_id).devices[0].slots == 3
    results = [(t.new_state, t.detail) for t in store.transitions(run_id) if t.new_state == "command:set_slots"]
    assert results[0][1].startswith("done cpu: 1 -> 3") and results[1][1].startswith("rejected no device 'gpu7'")


def test_requeue_failed_job_runs_it_again(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "bad", exit_code=4), fake_job(tmp_path, "ok")])
    drain(store)
    bad = store.jobs(run_id)[0]
    assert bad.state == "failed" and store.run(run_id).state == "finished"
    store.add_command(run_id, RequeueJob(bad.id))
    store.add_command(run_id, RequeueJob(store.jobs(run_id)[1].id))
    drain(store)
    bad = store.job(bad.id)
    assert bad.attempts == 2 and bad.state == "failed"  # it fails again: the point is it ran again
    assert (tmp_path / "record" / "bad.log").read_text().count("start ") == 2
    history = job_history(store, run_id, bad.id)
    assert ("queued", "requeued by user (as first launched)") in history
    assert ("command:requeue", "done bad requeued") in history


def test_the_history_says_whether_a_requeue_resumes_or_starts_fresh(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "bad", exit_code=4)])
    drain(store)
    bad = store.jobs(run_id)[0]
    checkpoint = tmp_path / "out" / "bad" / "checkpoint-240"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "adapter_model.safetensors").write_bytes(b"weights")
    for start, said in (("resume", "resume from checkpoint-240"), ("fresh", "fresh")):
        store.add_command(run_id, RequeueJob(bad.id, start=start))
        drain(store)
        assert ("queued", f"requeued by user ({said})") in job_history(store, run_id, bad.id)


def test_requeue_with_remedy_patches_config_and_env(tmp_path):
    job = fake_job(tmp_path, "oom", exit_code=1, extra=("--print-env", "PYTORCH_CUDA_ALLOC_CONF"))
    store, run_id = make_run(tmp_path, [job])
    (tmp_path / "out" / "oom" / "job.yaml").write_text(yaml.safe_dump({"train": {"batch_size": 8}}))
    drain(store)
    diagnosis = {"class": "cuda_oom", "remedies": [
        {"key": "expandable_segments", "change": "", "cost": "", "patch": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}},
        {"key": "smaller_micro_batch", "change": "", "cost": "", "patch": {"train.batch_size": 4, "train.grad_accum": 2}},
    ]}
    job_id = store.jobs(run_id)[0].id
    store.set_job_state(job_id, "failed", "triaged", diagnosis=Diagnosis.from_json(diagnosis))
    store.add_command(run_id, RequeueJob(job_id, remedy="smaller_micro_batch"))
    drain(store)
    config = yaml.safe_load((tmp_path / "out" / "oom" / "job.yaml").read_text())
    assert config["train"] == {"batch_size": 4, "grad_accum": 2}  # effective batch kept
    store.set_job_state(job_id, "failed", "triaged", diagnosis=Diagnosis.from_json(diagnosis))
    store.add_command(run_id, RequeueJob(job_id, remedy="expandable_segments"))
    drain(store)
    assert (tmp_path / "out" / "oom" / "env.txt").read_text().strip() == "expandable_segments:True"
    store.add_command(run_id, RequeueJob(job_id, remedy="no_such_remedy"))
    drain(store)
    details = [d for s, d in job_history(store, run_id, job_id) if s in ("queued", "command:requeue")]
    assert any("requeued with remedy smaller_micro_batch" in d for d in details)
    assert any("rejected remedy 'no_such_remedy' is not offered" in d for d in details)


def test_add_jobs_to_a_live_run(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "first", sleep=1.0)])
    engine = Engine(store)
    tick_until(engine, lambda: "first" in started(tmp_path))
    store.add_command(run_id, AddJobs((fake_job(tmp_path, "late1"), fake_job(tmp_path, "late2"))))
    store.add_command(run_id, AddJobs((fake_job(tmp_path, "first"),)))  # duplicate: rejected
    drain(store)
    assert [j.key for j in store.jobs(run_id)] == ["first", "late1", "late2"]
    assert all(j.state == "succeeded" for j in store.jobs(run_id))


def test_a_row_that_is_no_command_is_rejected_and_the_next_one_applied(tmp_path):
    until = time.time() + 60
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a")], countdown_until=until)
    raw_command(store, run_id, "launch_rockets")
    raw_command(store, run_id, "set_slots", '{"device": "cpu", "slots": "many"}')
    raw_command(store, run_id, "pause", "{damaged")
    store.add_command(run_id, ExtendCountdown(2))
    Engine(store).tick()
    answers = [(t.new_state, t.detail) for t in store.transitions(run_id) if t.new_state.startswith("command:")]
    assert answers[:2] == [("command:launch_rockets", "rejected unknown command 'launch_rockets'"),
                           ("command:set_slots", "rejected slots must be an integer >= 0, got 'many'")]
    assert answers[2][1].startswith("rejected its fields are not JSON")
    assert answers[3] == ("command:extend_countdown", "done countdown extended by 2 min")
    assert abs(store.run(run_id).countdown_until - (until + 120)) < 1 and not store.pending_commands(run_id)


def test_each_control_verb_sends_its_command(tmp_path, monkeypatch):
    monkeypatch.setattr(Client, "ensure_engine", lambda self, extra_env=None: False)  # the commands stay pending
    store = Store(tmp_path / "state" / "journal.sqlite")
    plan = f"suites: [{{name: demo, rounds: all}}]\npairs: ['1:tiny-sst2']\noutput_root: {json.dumps(str(tmp_path))}\n"
    run_id = store.create_run(plan, str(tmp_path), [CPU], time.time() + 600)
    job, = store.add_jobs(run_id, [fake_job(tmp_path, "a")])
    store.set_job_state(job, "failed", "for the test")
    verbs = (["cancel", str(job)], ["cancel", "--all"], ["pause"], ["resume"], ["slots", "cpu", "3"],
             ["requeue", str(job), "--remedy", "halve_batch"], ["requeue", str(job), "--fresh"], ["requeue", "--failed"],
             ["countdown", "skip"], ["countdown", "extend", "2"], ["add", "--suite", "demo", "--pairs", "5:tiny-sst2"])
    for argv in verbs:
        assert control_main([*argv, "--state-dir", str(tmp_path / "state"), "--no-wait"]) == 0, argv
    *sent, added = [c.command for c in store.pending_commands(run_id)]
    assert sent == [CancelJob(job), CancelRun(), PauseRun(), ResumeRun(), SetSlots("cpu", 3),
                    RequeueJob(job, remedy="halve_batch"), RequeueJob(job, start="fresh"), RequeueJobs((job,)),
                    SkipCountdown(), ExtendCountdown(2)]
    assert isinstance(added, AddJobs) and added.jobs and all("seed5" in job["key"] for job in added.jobs)


def test_extend_countdown(tmp_path):
    until = time.time() + 60
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a")], countdown_until=until)
    store.add_command(run_id, ExtendCountdown(2))
    Engine(store).tick()
    assert abs(store.run(run_id).countdown_until - (until + 120)) < 1


def test_on_oom_auto_retry_keeps_the_effective_batch(tmp_path):
    job = fake_job(tmp_path, "oomy", extra=("--oom-above-batch", "4"))
    store, run_id = make_run(tmp_path, [job])
    job_dir = tmp_path / "out" / "oomy"
    (job_dir / "job.yaml").write_text(yaml.safe_dump({"train": {"batch_size": 8, "grad_accum": 1}}))
    plan = "on_oom:\n  remedies: [gradient_checkpointing, smaller_micro_batch]\n  max_retries: 2\n"
    store._db.execute("UPDATE runs SET plan_yaml=? WHERE id=?", (plan, run_id))
    drain(store)
    final = store.jobs(run_id)[0]
    assert final.state == "succeeded" and final.attempts == 3
    config = yaml.safe_load((job_dir / "job.yaml").read_text())["train"]
    assert config["batch_size"] * config["grad_accum"] == 8  # effective batch unchanged
    assert config["gradient_checkpointing"] is True
    retries = [d for s, d in job_history(store, run_id, final.id) if d.startswith("auto-retry")]
    assert [r.split(":")[0] for r in retries] == ["auto-retry with remedy gradient_checkpointing",
                                                 "auto-retry with remedy smaller_micro_batch"]
