"""Commands through the journal, observed in the journal and in process state (real subprocesses)."""

import time

import yaml

from lat_core.contract.diagnosis import Diagnosis
from lat_core.engine.loop import Engine
from tests.conftest import fake_job, intervals, max_overlap
from tests.integration.test_engine import CPU, drain, make_run


def tick_until(engine, predicate, timeout=30):
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


def test_pause_stops_admission_and_resume_restarts_it(tmp_path):
    cpu1 = {**CPU, "slots": 1}
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, f"j{i}", sleep=0.5) for i in range(3)], devices=[cpu1])
    engine = Engine(store)
    tick_until(engine, lambda: "j0" in started(tmp_path))
    store.add_command(run_id, "pause")
    tick_until(engine, lambda: store.jobs(run_id)[0].state == "succeeded")
    for _ in range(20):  # a second of paused ticks: nothing new may start
        engine.tick()
        time.sleep(0.05)
    assert started(tmp_path) == {"j0"}
    assert [j.state for j in store.jobs(run_id)][1:] == ["queued", "queued"]
    store.add_command(run_id, "resume")
    drain(store)
    assert [j.state for j in store.jobs(run_id)] == ["succeeded"] * 3
    run_events = [t.new_state for t in store.transitions(run_id) if t.job_id is None]
    assert {"paused", "resumed", "command:pause", "command:resume"} <= set(run_events)


def test_slot_change_mid_run_raises_concurrency(tmp_path):
    cpu1 = {**CPU, "slots": 1}
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, f"j{i}", sleep=1.2) for i in range(6)], devices=[cpu1])
    engine = Engine(store)
    tick_until(engine, lambda: "j0" in started(tmp_path))
    store.add_command(run_id, "set_slots", device="cpu", slots=3)
    store.add_command(run_id, "set_slots", device="gpu7", slots=3)  # no such device: rejected
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
    store.add_command(run_id, "requeue", job_id=bad.id)
    store.add_command(run_id, "requeue", job_id=store.jobs(run_id)[1].id)
    drain(store)
    bad = store.job(bad.id)
    assert bad.attempts == 2 and bad.state == "failed"  # it fails again: the point is it ran again
    assert (tmp_path / "record" / "bad.log").read_text().count("start ") == 2
    history = job_history(store, run_id, bad.id)
    assert ("queued", "requeued by user") in history and ("command:requeue", "done bad requeued") in history


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
    store.add_command(run_id, "requeue", job_id=job_id, remedy="smaller_micro_batch")
    drain(store)
    config = yaml.safe_load((tmp_path / "out" / "oom" / "job.yaml").read_text())
    assert config["train"] == {"batch_size": 4, "grad_accum": 2}  # effective batch kept
    store.set_job_state(job_id, "failed", "triaged", diagnosis=Diagnosis.from_json(diagnosis))
    store.add_command(run_id, "requeue", job_id=job_id, remedy="expandable_segments")
    drain(store)
    assert (tmp_path / "out" / "oom" / "env.txt").read_text().strip() == "expandable_segments:True"
    store.add_command(run_id, "requeue", job_id=job_id, remedy="no_such_remedy")
    drain(store)
    details = [d for s, d in job_history(store, run_id, job_id) if s in ("queued", "command:requeue")]
    assert any("requeued with remedy smaller_micro_batch" in d for d in details)
    assert any("rejected remedy 'no_such_remedy' is not offered" in d for d in details)


def test_add_jobs_to_a_live_run(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "first", sleep=1.0)])
    engine = Engine(store)
    tick_until(engine, lambda: "first" in started(tmp_path))
    store.add_command(run_id, "add_jobs", jobs=[fake_job(tmp_path, "late1"), fake_job(tmp_path, "late2")])
    store.add_command(run_id, "add_jobs", jobs=[fake_job(tmp_path, "first")])  # duplicate: rejected
    drain(store)
    assert [j.key for j in store.jobs(run_id)] == ["first", "late1", "late2"]
    assert all(j.state == "succeeded" for j in store.jobs(run_id))


def test_extend_countdown(tmp_path):
    until = time.time() + 60
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "a")], countdown_until=until)
    store.add_command(run_id, "extend_countdown", minutes=2)
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
