"""What a queued job says it waits for, and how requeue restarts a job (engine side, real fake
trainers): stale waiting reasons, a succeeded job requeued, resume/fresh, pause on an ended run."""


from lat_core.contract.commands import CancelRun, PauseRun, RequeueJob
from lat_core.engine.loop import Engine
from lat_core.engine.requeue import restart_argv
from tests.conftest import fake_job
from tests.integration.test_control import raw_command, tick_until
from tests.integration.test_engine import CPU, drain, make_run

STALE = "waiting for the warm-start process to import torch, transformers, peft (15s)"


def starts(tmp_path, name):
    """The flags each start of the fake trainer ``name`` was given, in order."""
    lines = (tmp_path / "record" / f"{name}.log").read_text().splitlines()
    return [" ".join(line.split()[3:]) for line in lines if line.startswith("start ")]


def test_every_queued_job_passed_over_gets_the_current_reason(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, f"j{i}", sleep=1.5) for i in range(3)],
                             devices=[{**CPU, "slots": 1}])
    for job in store.jobs(run_id):
        store.set_waiting(job.id, STALE)  # what an earlier pass said while the warm start imported
    engine = Engine(store)
    tick_until(engine, lambda: store.jobs(run_id)[0].state == "running")
    engine.tick()
    assert [j.waiting for j in store.jobs(run_id)[1:]] == ["no free slot on cpu"] * 2
    store.add_command(run_id, PauseRun())
    tick_until(engine, lambda: store.run(run_id).paused)
    engine.tick()
    assert [j.waiting for j in store.jobs(run_id)[1:]] == ["admission paused"] * 2
    store.add_command(run_id, CancelRun())
    drain(store)


def test_requeue_of_a_succeeded_job_starts_a_new_attempt_cleanly(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "ok", extra=("--like-trainer",))])
    drain(store)
    job = store.jobs(run_id)[0]
    assert job.state == "succeeded"
    store.add_command(run_id, RequeueJob(job.id))
    drain(store)
    job = store.job(job.id)
    assert job.state == "succeeded" and job.attempts == 2, job.error
    assert starts(tmp_path, "ok") == ["", "--overwrite"]


def test_requeue_resume_and_fresh_give_the_trainer_its_flag(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "bad", exit_code=3)])
    drain(store)
    job = store.jobs(run_id)[0]
    store.add_command(run_id, RequeueJob(job.id, start="resume"))
    drain(store)
    store.add_command(run_id, RequeueJob(job.id, start="fresh"))
    drain(store)
    raw_command(store, run_id, "requeue", '{"start": "sideways"}', job_id=job.id)  # no front end can send it
    drain(store)
    assert starts(tmp_path, "bad") == ["", "--resume", "--overwrite"]
    answers = [t.detail for t in store.transitions(run_id, job_id=job.id) if t.new_state == "command:requeue"]
    assert answers[-1].startswith("rejected unknown requeue start 'sideways'")


def test_pause_on_an_ended_run_is_rejected_and_requeue_clears_a_stale_pause(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "bad", exit_code=3)])
    drain(store)
    store.add_command(run_id, PauseRun())
    drain(store)
    answer = [t.detail for t in store.transitions(run_id) if t.new_state == "command:pause"][-1]
    assert answer == f"rejected run {run_id} is finished; only an active run can be paused"
    assert not store.run(run_id).paused
    store.set_paused(run_id, True)  # a pause left over from before the rule
    store.add_command(run_id, RequeueJob(store.jobs(run_id)[0].id))
    drain(store)
    assert store.jobs(run_id)[0].attempts == 2 and not store.run(run_id).paused


def test_restart_argv_replaces_an_earlier_start_flag():
    argv = ["python", "-m", "lat_core.train", "--cfg", "job.yaml", "--resume"]
    assert restart_argv(argv, succeeded=True, start=None)[-1:] == ["--overwrite"]
    assert "--resume" not in restart_argv(argv, succeeded=True, start=None)
    assert restart_argv(argv, succeeded=False, start=None) == argv
    assert restart_argv(argv[:-1], succeeded=False, start="resume") == argv


def test_an_engine_that_starts_while_launched_jobs_run_says_it_replaced_a_dead_one(tmp_path):
    from lat_core.engine.__main__ import note_replacement

    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "j0", sleep=1.0), fake_job(tmp_path, "j1")],
                             devices=[{**CPU, "slots": 1}])
    note_replacement(store, 111)  # a fresh run: its first engine
    engine = Engine(store)
    tick_until(engine, lambda: store.jobs(run_id)[0].state == "running")
    note_replacement(store, 222)  # the first engine is gone (it was only ticked here) and a new one starts
    notes = [t.detail for t in store.transitions(run_id) if t.new_state == "engine"]
    assert notes == ["engine 222 started (replacing a dead one)"]
    drain(store)
