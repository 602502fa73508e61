"""``lat-tui requeue --failed``: a run's failed and cancelled jobs back to the queue with one command,
as a user runs it (subprocess verbs, the detached engine they start, fake trainers that fail)."""

import os
import signal

import psutil

from lat_core.contract.commands import CancelJob, CancelRun, RequeueJob, RequeueJobs
from lat_core.engine.loop import Engine
from lat_core.titles import job_title
from tests.conftest import fake_job
from tests.integration.test_cli_verbs import lat
from tests.integration.test_engine import drain, make_run
from tests.integration.test_engine_fused import LONG, MEMBERS, base, by_key, stepped  # noqa: F401 - base: a fixture
from tests.integration.test_engine_fused import drain as fused_drain
from tests.integration.test_engine_fused import make_run as make_fused_run
from tests.integration.test_requeue_and_waiting import starts


def finished_runs(tmp_path):
    """Run A: ok succeeded, bad and kept failed (kept left a checkpoint), early cancelled before it
    started. Run B, the latest: one job, succeeded."""
    store, a = make_run(tmp_path, [fake_job(tmp_path, "ok"), fake_job(tmp_path, "bad", exit_code=3),
                                   fake_job(tmp_path, "kept", exit_code=3), fake_job(tmp_path, "early")])
    early = {j.key: j for j in store.jobs(a)}["early"]
    store.add_command(a, CancelJob(early.id))
    drain(store)
    checkpoint = tmp_path / "out" / "kept" / "checkpoint-5"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "adapter_model.safetensors").write_bytes(b"weights")  # complete: contract.jobdir
    b = store.create_run("plan: test", str(tmp_path / "out_b"), [{"id": "cpu", "label": "cpu", "slots": 1}], 0.0)
    store.add_jobs(b, [fake_job(tmp_path, "fine")])
    drain(store)
    return store, a, b


def test_requeue_failed_sends_every_failed_and_cancelled_job_back_with_one_answer(tmp_path):
    store, a, b = finished_runs(tmp_path)
    state = tmp_path / "state"
    assert {j.key: j.state for j in store.jobs(a)} == {"ok": "succeeded", "bad": "failed", "kept": "failed",
                                                       "early": "cancelled"}
    nothing = lat(state, "requeue", "--failed")  # the latest run, B, has nothing to requeue
    assert nothing.returncode == 1 and nothing.stdout.strip() == f"run {b} has no failed or cancelled job; nothing was requeued"
    out = lat(state, "requeue", "--failed", "--run", str(a))
    assert out.returncode == 0, out.stderr
    ids = {j.key: j.id for j in store.jobs(a)}
    assert out.stdout.splitlines() == ["requeue_jobs: done 3 jobs requeued",
                                       f"  {ids['bad']} bad 1:tiny-sst2: fresh (no checkpoint)",
                                       f"  {ids['kept']} kept 1:tiny-sst2: resume from checkpoint-5",
                                       f"  {ids['early']} early 1:tiny-sst2: fresh (no checkpoint)"]
    assert lat(state, "wait", "--run", str(a)).returncode == 1  # bad fails again
    assert starts(tmp_path, "bad") == ["", "--overwrite"] and starts(tmp_path, "kept") == ["", "--resume"]
    assert starts(tmp_path, "early") == ["--overwrite"] and starts(tmp_path, "ok") == [""]
    assert {j.key: j.state for j in store.jobs(a)} == {"ok": "succeeded", "bad": "failed", "kept": "failed",
                                                       "early": "succeeded"}
    requeued = [t.job_id for t in store.transitions(a) if t.new_state == "queued" and "with the failed ones" in t.detail]
    assert sorted(requeued) == sorted([ids["bad"], ids["kept"], ids["early"]])


def test_requeue_failed_with_fresh_starts_every_job_over(tmp_path):
    store, a, _ = finished_runs(tmp_path)
    out = lat(tmp_path / "state", "requeue", "--failed", "--fresh", "--run", str(a), "--no-wait")
    assert out.returncode == 0 and out.stdout == ""
    assert lat(tmp_path / "state", "wait", "--run", str(a)).returncode == 1
    assert starts(tmp_path, "kept") == ["", "--overwrite"]
    answer = [t.detail for t in store.transitions(a) if t.new_state == "command:requeue_jobs"]
    assert len(answer) == 1 and "kept 1:tiny-sst2: fresh (asked)" in answer[0]


def test_bad_run_and_bad_arguments_are_usage_errors_and_send_nothing(tmp_path):
    store, a, _ = finished_runs(tmp_path)
    state = tmp_path / "state"
    out = lat(state, "requeue", "--failed", "--run", "99")
    assert out.returncode == 2 and "no run 99" in out.stderr, out.stderr
    out = lat(state, "requeue", "--failed", "3")
    assert out.returncode == 2 and "a job id or --failed, not both" in out.stderr
    out = lat(state, "requeue")
    assert out.returncode == 2 and "--failed" in out.stderr
    assert not [t for t in store.transitions(a) if t.new_state.startswith("command:requeue")]


def test_a_batch_with_one_job_that_cannot_be_requeued_requeues_none(tmp_path):
    """Atomic: a job requeued alone just before (its command handled first) makes the batch that
    lists it rejected as a whole, and the other listed job stays failed."""
    store, a, _ = finished_runs(tmp_path)
    ids = {j.key: j.id for j in store.jobs(a)}
    store.add_command(a, RequeueJob(ids["bad"]))
    store.add_command(a, RequeueJobs((ids["bad"], ids["kept"])))
    Engine(store).tick()
    answer = [t.detail for t in store.transitions(a) if t.new_state == "command:requeue_jobs"]
    assert answer == ["rejected nothing was requeued: only failed or cancelled jobs are requeued with the failed "
                      f"ones; job {ids['bad']} bad 1:tiny-sst2 is queued"]
    assert store.job(ids["kept"]).state == "failed" and store.job(ids["kept"]).argv == store.jobs(a)[2].argv
    assert "--resume" not in store.job(ids["kept"]).argv
    store.add_command(a, CancelRun())
    drain(store)


def test_the_members_of_a_killed_fused_group_are_requeued_at_once(tmp_path, base):  # noqa: F811 - base: a fixture
    """The issue's case: kill -9 of a group fails every member; one verb puts them all back."""
    store, run_id = make_fused_run(tmp_path, base, "true", **{k: LONG for k in MEMBERS})
    engine = Engine(store)
    fused_drain(engine, until=lambda: stepped(by_key(store, run_id)["a"]))
    runner = psutil.Process(store.attempts(by_key(store, run_id)["a"].id)[0].pid)
    os.kill(runner.children()[0].pid, signal.SIGKILL)
    fused_drain(engine)
    assert {j.state for j in store.jobs(run_id)} == {"failed"}
    out = lat(tmp_path / "state", "requeue", "--failed")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "requeue_jobs: done 3 jobs requeued"
    assert all(f"{job.id} {job_title(job)}: fresh (no checkpoint)" in out.stdout for job in store.jobs(run_id))
    assert {j.state for j in store.jobs(run_id)} <= {"queued", "running"}
    lat(tmp_path / "state", "cancel", "--all")
    assert lat(tmp_path / "state", "wait").returncode == 1
    assert {(j.state, j.attempts) for j in store.jobs(run_id)} == {("cancelled", 2)}
