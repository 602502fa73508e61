"""Nothing a job does can stall the queue: bad events, any exit signal, a triage that raises, an
engine that dies between two journal writes, a journal that lost its tail.

Real runner processes, journal and exit records. Each test checks one final state and one launch
per job (the trainers' own records), that the run drains, and what the user is told."""

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lat_core.contract.commands import CancelJob, CancelRun, RequeueJob, ResumeRun
from lat_core.engine.backends.local import LocalBackend
from lat_core.engine.launch import Launched, launch, process_start_time
from lat_core.engine.loop import Engine
from lat_core.engine.recovery import LAUNCH_GRACE_S
from lat_core.contract.jobdir import AttemptFiles, ExitRecord, JobDir
from lat_core.contract.states import JOB_FINAL, JobState, RunState
from lat_core.contract.journal import Store
from lat_tui.format import progress_line
from lat_tui.status import main as status
from tests.conftest import ROOT, fake_job
from tests.helpers.journal import restore_journal, snapshot_journal
from tests.integration.test_journal_faults import fill, tmpfs  # noqa: F401 - a fixture
from tests.helpers.waits import HANG_S

FAULTY = ROOT / "tests" / "helpers" / "faulty_trainer.py"
CPU = {"id": "cpu", "label": "cpu", "slots": 4, "env": {"CUDA_VISIBLE_DEVICES": ""}}


def faulty_job(tmp_path, name, *, lines=b"", **options):
    job = fake_job(tmp_path, name)
    args = [sys.executable, str(FAULTY), "--record", str(tmp_path / "record"), "--name", name]
    if lines:
        (tmp_path / f"{name}.lines").write_bytes(lines)
        args += ["--lines", str(tmp_path / f"{name}.lines")]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return {**job, "argv": args}


def make_run(tmp_path, jobs, plan="plan: test", devices=(CPU,)):
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run(plan, str(tmp_path / "out"), list(devices), 0.0)
    store.add_jobs(run_id, jobs)
    return store, run_id


def drain(store, engine=None, timeout=HANG_S, **kw):
    engine = engine or Engine(store, **kw)
    deadline = time.time() + timeout
    while engine.tick():
        assert time.time() < deadline, "the run did not drain in time"
        time.sleep(0.05)
    return engine


def launches(tmp_path, name) -> int:
    log = tmp_path / "record" / f"{name}.log"
    return log.read_text().count("start ") if log.exists() else 0


def history(store, run_id, job_id=None):
    return [(t.new_state, t.detail) for t in store.transitions(run_id, job_id=job_id)]


def assert_settled(store, run_id, tmp_path, launched=1):
    """One final state per job, each launched ``launched`` times, the run drained."""
    assert store.run(run_id).state in (RunState.FINISHED, RunState.CANCELLED)
    assert not store.open_attempts(run_id)
    for job in store.jobs(run_id):
        assert job.state in JOB_FINAL, (job.key, job.state)
        states = [s for s, _ in history(store, run_id, job.id)]
        last_start = len(states) - states[::-1].index("running") if "running" in states else 0
        assert sum(s in JOB_FINAL for s in states[last_start:]) == 1, (job.key, states)
        assert launches(tmp_path, job.key) == launched, job.key


# ---------------------------------------------------------------------------- events
BAD_LINES = {
    "null-step": b'{"event": "step", "step": null, "loss": 0.5}\n',
    "string-loss": b'{"event": "step", "step": 2, "loss": "0.5"}\n',
    "nan-loss": b'{"event": "step", "step": 3, "loss": NaN}\n',
    "huge-number": b'{"event": "step", "step": 1e400, "loss": 1e400}\n',
    "garbage": bytes(b for b in range(256) if b != ord("\n")) * 4 + b"\n",
    "memory-text": b'{"event": "memory", "peak_gpu_bytes": "a lot"}\n',
}


def test_bad_events_are_skipped_with_a_reason_and_every_job_goes_on(tmp_path):
    jobs = [faulty_job(tmp_path, name, lines=lines) for name, lines in BAD_LINES.items()]
    jobs.append(faulty_job(tmp_path, "huge-line", big_line_mb=100))
    store, run_id = make_run(tmp_path, jobs)
    drain(store)
    assert_settled(store, run_id, tmp_path)
    for job in store.jobs(run_id):
        assert job.state is JobState.SUCCEEDED, (job.key, job.error)
        assert (job.last_step, job.last_loss) == (9, 0.125), job.key  # good lines after the bad one
        told = [d for s, d in history(store, run_id, job.id) if s == "bad events"]
        if job.key == "nan-loss":
            assert told == []  # a NaN loss is a fact (the trainer writes null), not a bad line
        else:
            assert len(told) == 1 and "1 bad line(s) skipped; first: line " in told[0], (job.key, told)
    huge = next(j for j in store.jobs(run_id) if j.key == "huge-line")
    assert any(d.endswith("line 2: a line over 1024 KiB") for _, d in history(store, run_id, huge.id))


def test_an_engine_restarted_on_bad_events_reads_them_again_without_dying(tmp_path):
    store, run_id = make_run(tmp_path, [faulty_job(tmp_path, "bad", lines=BAD_LINES["null-step"], sleep=1.5)])
    first = Engine(store)
    deadline = time.time() + HANG_S
    while not store.jobs(run_id)[0].last_step:
        assert time.time() < deadline
        first.tick()
        time.sleep(0.05)
    drain(store)  # a fresh engine: the events are read from the start again
    assert_settled(store, run_id, tmp_path)
    assert store.jobs(run_id)[0].state is JobState.SUCCEEDED


# ---------------------------------------------------------------------------- exits
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGSEGV, signal.SIGKILL, signal.SIGRTMIN + 6, 64])
def test_a_trainer_killed_by_any_signal_fails_alone_with_the_signal_named(tmp_path, signum):
    store, run_id = make_run(tmp_path, [faulty_job(tmp_path, "killed", signal=signum),
                                        faulty_job(tmp_path, "fine")])
    drain(store)
    assert_settled(store, run_id, tmp_path)
    killed, fine = store.jobs(run_id)
    names = {signal.SIGRTMIN + 6: "SIGRTMIN+6", 64: "SIGRTMAX"}
    name = names.get(signum) or signal.Signals(signum).name
    assert killed.state is JobState.FAILED and killed.returncode == -signum
    assert killed.error.startswith(f"killed by {name}"), killed.error
    assert fine.state is JobState.SUCCEEDED


@pytest.fixture
def stand_in():
    """A live process to stand for every recorded-exit job (its record is read before its pid)."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def recorded_exit(log: Path, stand_in, record=lambda argv: ExitRecord(-int(argv[-1]))):
    """A launch that writes the runner's exit record (for returncode -N, N from the argv) at once:
    all 64 signals cheaply, through the same exit-record writer the runner uses (a dict: a record
    not of the runner's shape, written as it is)."""
    def launch_fn(argv, env, job_dir, exit_path, show_env=()):
        exit_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as fh:
            fh.write(f"{argv[-1]}\n")
        written = record(argv)
        if isinstance(written, ExitRecord):
            AttemptFiles(exit_path).write_exit(written)
        else:
            exit_path.write_text(json.dumps(written))
        return Launched(stand_in.pid, process_start_time(stand_in.pid) or 0.0)
    return launch_fn


def test_every_exit_signal_1_to_64_ends_its_job_once_with_a_readable_reason(tmp_path, stand_in):
    jobs = [{**fake_job(tmp_path, f"sig{n:02d}"), "argv": ["never-run", str(n)]} for n in range(1, 65)]
    store, run_id = make_run(tmp_path, jobs, devices=({**CPU, "slots": 64},))
    log = tmp_path / "launches.txt"
    drain(store, launch_fn=recorded_exit(log, stand_in))
    assert sorted(log.read_text().split()) == sorted(str(n) for n in range(1, 65))  # one launch each
    assert store.run(run_id).state is RunState.FINISHED
    for n, job in enumerate(store.jobs(run_id), start=1):
        assert job.state is JobState.FAILED and job.returncode == -n
        assert job.error.startswith("killed by ") and "Traceback" not in job.error
        assert len([s for s, _ in history(store, run_id, job.id) if s in JOB_FINAL]) == 1


class DiagnoseRaises(LocalBackend):
    """A backend whose own diagnosis (Slurm's sacct, ...) blows up."""

    diagnoses_failures = True

    def diagnose(self, pid):
        raise RuntimeError("sacct printed nonsense")


def test_a_triage_that_raises_fails_that_job_with_the_reason_and_the_engine_lives(tmp_path):
    store, run_id = make_run(tmp_path, [faulty_job(tmp_path, "dies", exit=3), faulty_job(tmp_path, "fine")])
    drain(store, backend=DiagnoseRaises(launch))
    assert_settled(store, run_id, tmp_path)
    dies, fine = store.jobs(run_id)
    assert dies.state is JobState.FAILED and dies.returncode == 3
    assert "exit code 3" in dies.error and "(triage failed: RuntimeError: sacct printed nonsense)" in dies.error
    assert fine.state is JobState.SUCCEEDED


def test_an_unreadable_exit_record_fails_the_job_with_why(tmp_path, stand_in):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "odd")])
    drain(store, launch_fn=recorded_exit(tmp_path / "launches.txt", stand_in, lambda argv: {"returncode": "-9"}))
    job = store.jobs(run_id)[0]
    assert job.state is JobState.FAILED and "the exit record's returncode is str" in job.error


# ---------------------------------------------------------------------------- engine errors
def test_a_run_whose_tick_raises_is_told_and_retried_and_other_runs_drain(tmp_path, capsys):
    store, broken = make_run(tmp_path, [fake_job(tmp_path, "a")], plan="min_free_gb: lots")
    fine = store.create_run("plan: test", str(tmp_path / "out"), [CPU], 0.0)
    store.add_jobs(fine, [fake_job(tmp_path, "b")])
    engine = Engine(store)
    deadline = time.time() + HANG_S
    while store.run(fine).state is not RunState.FINISHED:
        assert time.time() < deadline
        engine.tick()
        time.sleep(0.05)
    errors = [d for s, d in history(store, broken) if s == "engine error"]
    told = f"JournalError: run {broken}'s saved plan is damaged: field 'min_free_gb': expected a number, got str 'lots'"
    assert len(errors) == 1 and errors[0].startswith(told)
    told = f"engine error: {told}"
    status(["--state-dir", str(tmp_path / "state"), "--run", str(broken)])
    assert told in capsys.readouterr().out
    progress = [progress_line(t, None, 0.0, "") for t in store.transitions(broken) if t.job_id is None]
    assert any(f"run {broken}: {told}" in line for line in progress)  # what headless prints
    store.add_command(broken, CancelRun())  # a broken run can always be cleared
    drain(store, engine)
    assert store.run(broken).state is RunState.CANCELLED and store.jobs(broken)[0].state is JobState.CANCELLED
    assert launches(tmp_path, "a") == 0 and store.engine_error(broken) is None


# ---------------------------------------------------------------------------- crash points
def crash_after_attempt_row(store, run_id):
    """The engine recorded the attempt (and running, in the same transaction) and died before launching."""
    job = store.jobs(run_id)[0]
    store.start_attempt(job.id, "cpu", str(JobDir(job.job_dir).attempt(1).exit_path))


def crash_after_launch(store, run_id):
    """...launched, and died before recording the runner's pid."""
    job = store.jobs(run_id)[0]
    exit_path = JobDir(job.job_dir).attempt(1).exit_path
    store.start_attempt(job.id, "cpu", str(exit_path))
    launch(job.argv, {}, Path(job.job_dir), exit_path)
    deadline = time.time() + HANG_S
    while not Path(f"{exit_path}.pid").exists():  # the runner's first act; an engine restart takes longer
        assert time.time() < deadline
        time.sleep(0.05)


def crash_after_pid(store, run_id):
    """...recorded the pid, and died while the job ran (and ended)."""
    job = store.jobs(run_id)[0]
    exit_path = JobDir(job.job_dir).attempt(1).exit_path
    attempt_id, _ = store.start_attempt(job.id, "cpu", str(exit_path))
    launched = launch(job.argv, {}, Path(job.job_dir), exit_path)
    store.set_attempt_pid(attempt_id, launched.pid, launched.pid_start)
    launched.popen.wait()


def crash_between_attempt_end_and_job_state(store, run_id):
    """An older engine's split writes: the attempt ended (exit 0), the job still says running."""
    crash_after_pid(store, run_id)
    attempt = store.open_attempts(run_id)[0]
    with sqlite3.connect(store.path) as db:  # commits; the test's end closes it
        db.execute("UPDATE attempts SET ended=?, returncode=0 WHERE id=?", (time.time(), attempt.id))


def crash_with_a_stray_open_attempt_after_success(store, run_id):
    """An older engine's split writes: an attempt row without pid, and the job succeeded anyway."""
    crash_after_pid(store, run_id)
    drain(store)
    job = store.jobs(run_id)[0]
    store.start_attempt(job.id, "cpu", str(JobDir(job.job_dir).attempt(2).exit_path))
    store.set_job_state(job.id, JobState.SUCCEEDED, "exit 0")
    store.set_run_state(run_id, RunState.RUNNING, "stray attempt")


@pytest.mark.parametrize("crash, final, launched", [
    (crash_after_attempt_row, JobState.FAILED, 0),
    (crash_after_launch, JobState.SUCCEEDED, 1),
    (crash_after_pid, JobState.SUCCEEDED, 1),
    (crash_between_attempt_end_and_job_state, JobState.SUCCEEDED, 1),
    (crash_with_a_stray_open_attempt_after_success, JobState.SUCCEEDED, 1),
])
def test_an_engine_dying_between_two_journal_writes_never_strands_or_doubles_a_job(tmp_path, crash, final, launched):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "j", sleep=0.2)])
    crash(store, run_id)
    drain(store, Engine(store, clock=lambda: time.time() + LAUNCH_GRACE_S + 1))  # the launch grace is over
    assert_settled(store, run_id, tmp_path, launched=launched)
    job = store.jobs(run_id)[0]
    assert job.state is final, (job.state, job.error)
    if final is JobState.FAILED:
        assert job.error == "launch interrupted by an engine crash; requeue it"


CRASH_AT_RETRY = """
import os, sys, time
from lat_core.engine import recovery
from lat_core.engine.loop import Engine
from lat_core.contract.journal import Store

def crash(*args, **kwargs):  # the engine dies right after the attempt's end, before the requeue
    os._exit(9)

recovery.maybe_retry = crash
engine = Engine(Store(sys.argv[1]))
while engine.tick():
    time.sleep(0.05)
"""


def test_an_engine_dying_between_a_failed_attempt_and_its_retry_still_retries(tmp_path):
    """The plan retries the job's failure class; the engine process dies after ending the attempt
    and before requeueing it. The restarted engine must still retry the job."""
    job = fake_job(tmp_path, "flaky", sleep=0.1, extra=("--fail-log", "port_in_use", "--fail-before-attempt", "2"))
    store, run_id = make_run(tmp_path, [job], plan="on_failure: {classes: [rendezvous], max_retries: 2, backoff_s: 0}\n")
    crashed = subprocess.run([sys.executable, "-c", CRASH_AT_RETRY, str(store.path)], timeout=HANG_S, check=False)
    assert crashed.returncode == 9  # it died at the crash point
    drain(store)
    job = store.jobs(run_id)[0]
    assert job.state is JobState.SUCCEEDED and job.attempts == 2, (job.state, job.attempts, job.error)
    retries = [d for s, d in history(store, run_id, job.id) if s == "queued" and d.startswith("auto-retry")]
    assert retries == ["auto-retry after rendezvous (1/2): in 0s, from the start"]


def test_a_job_stuck_running_without_an_attempt_is_cancellable(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "stuck")])
    job = store.jobs(run_id)[0]
    store.set_job_state(job.id, JobState.RUNNING, "an old engine's half-written launch")
    store.add_command(run_id, CancelJob(job.id))
    drain(store)
    job = store.jobs(run_id)[0]
    assert job.state is JobState.CANCELLED and launches(tmp_path, "stuck") == 0
    assert store.command(1).status == "done"


# ---------------------------------------------------------------------------- lost journal tail
def test_a_journal_that_lost_its_tail_relaunches_nothing(tmp_path):
    jobs = [fake_job(tmp_path, "ok", sleep=0.2), faulty_job(tmp_path, "bad", exit=2),
            fake_job(tmp_path, "slow", sleep=6)]
    store, run_id = make_run(tmp_path, jobs)
    journal = Path(store.path)
    before = snapshot_journal(journal)
    engine = Engine(store)
    deadline = time.time() + HANG_S
    while {j.key: j.state for j in store.jobs(run_id)} != {"ok": "succeeded", "bad": "failed", "slow": "running"}:
        assert time.time() < deadline
        engine.tick()
        time.sleep(0.05)
    store.close()  # the engine dies; the journal loses its tail
    restore_journal(journal, before)
    store = Store(journal)
    assert all(j.state is JobState.QUEUED for j in store.jobs(run_id))
    drain(store)
    assert_settled(store, run_id, tmp_path, launched=1)
    states = {j.key: j for j in store.jobs(run_id)}
    assert states["ok"].state is JobState.SUCCEEDED and states["slow"].state is JobState.SUCCEEDED
    assert states["bad"].state is JobState.FAILED and "exit code 2" in states["bad"].error
    told = {j.key: history(store, run_id, j.id)[1][1] for j in store.jobs(run_id)}
    assert told["ok"] == "settled from attempt-1's exit record (the journal had lost it): not launched again"
    assert told["slow"].startswith("adopted attempt-1, still running as pid ")


def test_records_of_an_earlier_run_in_the_same_folder_do_not_count(tmp_path):
    job = fake_job(tmp_path, "again")
    old = JobDir(job["job_dir"]).attempt(1).exit_path
    old.parent.mkdir(parents=True)
    AttemptFiles(old).write_exit(ExitRecord(0))
    (Path(job["job_dir"]) / "events.jsonl").write_text(json.dumps({"t": 1.0, "event": "finished"}) + "\n")
    time.sleep(1.2)  # older than the job by more than file times' slack
    store, run_id = make_run(tmp_path, [job])
    drain(store)
    assert_settled(store, run_id, tmp_path, launched=1)


def test_a_job_whose_launch_never_happened_is_cancellable(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "never")])
    crash_after_attempt_row(store, run_id)
    job = store.jobs(run_id)[0]
    store.add_command(run_id, CancelJob(job.id))
    drain(store, Engine(store, clock=lambda: time.time() + LAUNCH_GRACE_S + 1))
    assert_settled(store, run_id, tmp_path, launched=0)
    job = store.jobs(run_id)[0]
    assert job.state is JobState.CANCELLED and job.error == "cancelled by user"
    assert store.command(1).status == "done"


def test_a_job_stuck_running_without_an_attempt_can_be_requeued_and_runs_once(tmp_path):
    store, run_id = make_run(tmp_path, [fake_job(tmp_path, "stuck")])
    job = store.jobs(run_id)[0]
    store.set_job_state(job.id, JobState.RUNNING, "an old engine's half-written launch")
    store.add_command(run_id, RequeueJob(job.id))
    drain(store)
    assert_settled(store, run_id, tmp_path, launched=1)
    assert store.jobs(run_id)[0].state is JobState.SUCCEEDED and store.command(1).status == "done"


def test_the_detached_engine_survives_what_froze_the_queue_on_main(tmp_path):
    """The issue's own case: a null step, a string loss, a real-time signal death and a non-numeric
    memory event, under the real detached engine; the run drains and nothing runs twice."""
    from lat_core.front.service import EngineLock, ensure_engine, open_store

    state = tmp_path / "state"
    store = open_store(state)
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [CPU], 0.0)
    store.add_jobs(run_id, [faulty_job(tmp_path, "null-step", lines=BAD_LINES["null-step"]),
                            faulty_job(tmp_path, "string-loss", lines=BAD_LINES["string-loss"]),
                            faulty_job(tmp_path, "rt-signal", signal=signal.SIGRTMIN + 6),
                            faulty_job(tmp_path, "memory-text", lines=BAD_LINES["memory-text"]),
                            fake_job(tmp_path, "plain")])
    ensure_engine(state)
    deadline = time.time() + HANG_S
    while store.run(run_id).state is not RunState.FINISHED:
        assert time.time() < deadline, [(j.key, j.state) for j in store.jobs(run_id)]
        time.sleep(0.2)
    assert_settled(store, run_id, tmp_path)
    states = {j.key: j for j in store.jobs(run_id)}
    assert states["rt-signal"].state is JobState.FAILED and states["rt-signal"].error.startswith("killed by SIGRTMIN+6")
    assert all(j.state is JobState.SUCCEEDED for k, j in states.items() if k != "rt-signal")
    assert "Traceback" not in (state / "engine.log").read_text()
    deadline = time.time() + HANG_S
    while EngineLock(state).is_held():  # it exits by itself once no run is active
        assert time.time() < deadline
        time.sleep(0.2)


# ---------------------------------------------------------------------------- full output disk
def test_a_full_output_disk_pauses_the_run_once_and_fails_only_the_jobs_that_hit_it(tmp_path, tmpfs, capfd):
    out = tmpfs("out", size="2m")
    jobs = [fake_job(tmp_path, f"j{i}", sleep=0.2) for i in range(8)]
    store, run_id = make_run(tmp_path, jobs, devices=({**CPU, "slots": 2},))
    fill(out)
    engine = Engine(store)
    deadline = time.time() + HANG_S
    while not (store.run(run_id).paused and not store.running_jobs(run_id)):
        assert time.time() < deadline, [(j.key, j.state, j.error) for j in store.jobs(run_id)]
        engine.tick()
        time.sleep(0.05)
    reason = f"disk full at {out}: free space, then `lat-tui resume`"
    assert [d for s, d in history(store, run_id) if s == "paused"] == [reason]
    failed = [j for j in store.jobs(run_id) if j.state is JobState.FAILED]
    assert 1 <= len(failed) <= 2  # the jobs started before the pause, nothing after
    for job in failed:
        assert job.error.startswith(f"disk full at {out}") and "engine error" not in job.error, job.error
        assert job.diagnosis.cls == "disk_full"
    queued = [j for j in store.jobs(run_id) if j.state is JobState.QUEUED]
    assert len(queued) == 8 - len(failed) and {j.waiting for j in queued} == {reason}
    assert "Traceback" not in capfd.readouterr().err
    (out / "filler").unlink()  # the user frees space, requeues the failed jobs and resumes
    for job in failed:
        store.add_command(run_id, RequeueJob(job.id))
    store.add_command(run_id, ResumeRun())
    drain(store, engine)
    assert [j.state for j in store.jobs(run_id)] == [JobState.SUCCEEDED] * 8


def test_a_job_whose_own_write_hit_a_full_disk_pauses_its_run(tmp_path):
    jobs = [fake_job(tmp_path, "full", sleep=0.1, extra=("--fail-log", "disk_full")), fake_job(tmp_path, "next")]
    store, run_id = make_run(tmp_path, jobs, devices=({**CPU, "slots": 1},))
    engine = Engine(store)
    deadline = time.time() + HANG_S
    while store.jobs(run_id)[0].state is not JobState.FAILED:
        assert time.time() < deadline
        engine.tick()
        time.sleep(0.05)
    engine.tick()
    full, waiting = store.jobs(run_id)
    assert full.diagnosis.cls == "disk_full" and store.run(run_id).paused
    reason = f"disk full at {tmp_path / 'out'}: free space, then `lat-tui resume`"
    assert waiting.state is JobState.QUEUED and waiting.waiting == reason and launches(tmp_path, "next") == 0
