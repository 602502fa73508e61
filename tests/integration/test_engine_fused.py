"""The engine with ``fuse: true`` (``auto``, the default, fuses on GPUs only): same-base tiny GLA
jobs (real trainer, CPU) run as one fused process on one slot; each member keeps its own attempt, losses, cancel, failure and exit reason."""
import os
import re
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from lat_core.contract.commands import AddJobs, CancelJob, CancelRun
from lat_core.engine import groups
from lat_core.engine.launch import launch
from lat_core.engine.loop import Engine
from lat_core.contract.jobdir import AttemptFiles, JobDir, Started, Step
from lat_core.contract.journal import Store
from tests.conftest import fake_job
from tests.helpers.fused import events_of, job_dir, saved_tiny_base
from tests.helpers.journal import restore_journal, snapshot_journal
from tests.helpers.titles import title_of
from tests.helpers.waits import HANG_S

CPU = {"id": "cpu", "label": "cpu", "slots": 1, "env": {"CUDA_VISIBLE_DEVICES": ""}}
MEMBERS = {"a": ({"r": 4, "alpha": 8}, {"batch_size": 8}, 3),
           "b": ({"r": 8, "alpha": 16}, {"batch_size": 4, "grad_accum": 2, "lr": 5e-3}, 5),
           "c": ({"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]}, {"batch_size": 6, "max_steps": 4}, 7)}
LONG = {"max_steps": 400, "eval_every": 1000, "save_every": 1000}

pytestmark = pytest.mark.xdist_group("engine_fused")

@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return saved_tiny_base(tmp_path_factory.mktemp("fused_engine") / "base")

def jobs(root, base, members=MEMBERS, **train_over):
    out = []
    for name, (peft, train, seed) in members.items():
        folder = job_dir(root, name, base, peft=dict(peft), train={**train, **train_over.get(name, {})}, seed=seed)
        out.append({"key": name, "suite": "t", "round": 1, "stem": name, "seed": seed, "dataset": "tiny-sst2",
                    "job_dir": str(folder), "env": {},
                    "argv": [sys.executable, "-m", "lat_core.train", "--cfg", str(folder / "job.yaml")]})
    return out

def make_run(tmp_path, base, fuse: str, members=MEMBERS, slots=1, warm=False, **train_over):
    store = Store(tmp_path / "state" / "journal.sqlite")
    plan = f"fuse: {fuse}\nwarm_start: {str(warm).lower()}\n"
    run_id = store.create_run(plan, str(tmp_path / "out"), [{**CPU, "slots": slots}], 0.0)
    store.add_jobs(run_id, jobs(tmp_path / "out", base, members, **train_over))
    return store, run_id

def drain(engine, timeout=HANG_S, until=None):
    deadline = time.time() + timeout
    while engine.tick():
        assert time.time() < deadline, "engine did not drain in time"
        if until is not None and until():
            return
        time.sleep(0.1)

def by_key(store, run_id):
    return {j.key: j for j in store.jobs(run_id)}

def losses(job):
    return {e.step: e.loss for e in events_of(Path(job.job_dir), Step)}

CLOSED = r"\[lat\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d "  # the line that closes an attempt's train.log


def last_line(job) -> str:
    return Path(job.job_dir, "train.log").read_text().rstrip("\n").splitlines()[-1]

def stepped(job, n=2) -> bool:
    """The job has logged n steps: its group's process is training."""
    return JobDir(job.job_dir).events_path.is_file() and len(events_of(Path(job.job_dir), Step)) >= n

def test_a_job_that_does_not_fuse_says_why_in_its_history(tmp_path, base):
    """Under ``fuse: true`` a job that starts alone says why: its config keeps it out, or no queued
    job shares its base and data (nothing is dropped silently, a speed-up included)."""
    members = {"a": MEMBERS["a"], "ck": ({"r": 4, "alpha": 8}, {"batch_size": 8, "gradient_checkpointing": True}, 3)}
    store, run_id = make_run(tmp_path, base, "true", members, slots=2, **{k: {"max_steps": 2} for k in members})
    drain(Engine(store))
    jobs_ = by_key(store, run_id)
    said = {t.job_id: t.detail for t in store.transitions(run_id) if t.new_state == "fused"}
    assert said[jobs_["ck"].id].startswith("trains alone: ") and "gradient_checkpointing" in said[jobs_["ck"].id]
    assert said[jobs_["a"].id] == "trains alone: no queued job shares its base, data and settings now"
    assert {j.state for j in jobs_.values()} == {"succeeded"}


def test_a_group_of_three_succeeds_with_the_losses_of_jobs_alone(tmp_path, base):
    store, run_id = make_run(tmp_path / "fused", base, "true")
    drain(Engine(store))
    fused = by_key(store, run_id)
    assert {k: j.state for k, j in fused.items()} == {k: "succeeded" for k in MEMBERS}
    attempts = {k: store.attempts(j.id) for k, j in fused.items()}
    assert all(len(a) == 1 and a[0].returncode == 0 for a in attempts.values())
    assert len({a[0].pid for a in attempts.values()}) == 1  # one process for the three
    assert all(any(t.new_state == "fused" for t in store.transitions(run_id) if t.job_id == j.id)
               for j in fused.values())
    said = {t.detail for t in store.transitions(run_id) if t.new_state == "fused"}  # one line for the group
    assert len(said) == 1 and said.pop().endswith(f"one process for jobs {', '.join(str(j.id) for j in fused.values())} on cpu")
    group_log = "".join(JobDir(j.job_dir).train_log.read_text() for j in fused.values())   # the leader's log
    loop = re.search(r"group loop: (\d+) passes in [\d.]+ s, \d+ ms a pass: building passes [\d.]+ s \(\d+%\), waiting on losses", group_log)
    assert loop and int(loop[1]) >= 4, group_log[-2000:]   # at least a pass per step of c's 4
    alone_store, alone_id = make_run(tmp_path / "alone", base, "auto")   # the default: on the CPU, alone
    drain(Engine(alone_store))
    alone = by_key(alone_store, alone_id)
    assert {k: j.state for k, j in alone.items()} == {k: "succeeded" for k in MEMBERS}
    assert len({alone_store.attempts(j.id)[0].pid for j in alone.values()}) == 3
    for key in MEMBERS:
        ours, theirs = losses(fused[key]), losses(alone[key])
        assert sorted(ours) == sorted(theirs) and ours
        assert all(ours[s] == pytest.approx(v, rel=1e-5) for s, v in theirs.items()), key
        assert fused[key].last_step == alone[key].last_step

def test_a_group_forks_from_the_preloaded_process_as_a_job_alone_does(tmp_path, base):
    store, run_id = make_run(tmp_path, base, "true", warm=True)
    engine = Engine(store)
    try:
        drain(engine)
    finally:
        engine.close()
    fused = by_key(store, run_id)
    assert {k: j.state for k, j in fused.items()} == {k: "succeeded" for k in MEMBERS}
    assert len({store.attempts(j.id)[0].pid for j in fused.values()}) == 1
    leader = min(fused.values(), key=lambda j: j.seq)
    assert "warm start: forked from the preloaded process" in Path(leader.job_dir, "train.log").read_text()
    assert any(t.new_state == "warm start" and t.detail == "forked from the preloaded process"
               for t in store.transitions(run_id) if t.job_id == leader.id)


def test_cancel_of_one_member_leaves_the_others_running(tmp_path, base):
    store, run_id = make_run(tmp_path, base, "true", b=LONG)
    engine = Engine(store)
    drain(engine, until=lambda: stepped(by_key(store, run_id)["b"]))
    store.add_command(run_id, CancelJob(by_key(store, run_id)["b"].id))
    drain(engine)
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {"a": "succeeded", "b": "cancelled", "c": "succeeded"}
    assert jobs_["b"].error == "cancelled by user" and jobs_["b"].last_step < 400
    assert store.attempts(jobs_["b"].id)[0].returncode == -15
    assert re.fullmatch(CLOSED + r"cancelled by user at step \d+/400: killed by SIGTERM", last_line(jobs_["b"]))
    assert re.fullmatch(CLOSED + r"succeeded at step (\d+)/\1: exit code 0", last_line(jobs_["a"]))  # its own log

def test_a_failing_member_fails_alone(tmp_path, base):
    store, run_id = make_run(tmp_path, base, "true", b={"lr": 1e30})  # b's loss turns non-finite
    drain(Engine(store))
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {"a": "succeeded", "b": "failed", "c": "succeeded"}
    assert "exit code 1" in jobs_["b"].error, jobs_["b"].error

def test_a_member_that_cannot_start_fails_alone_with_its_reason(tmp_path, base):
    """b's data cannot fill its grad_accum, found only as the group builds: b fails with that reason
    (triage: its configuration refused), a and c train in the same process and succeed."""
    store, run_id = make_run(tmp_path, base, "true", b={"grad_accum": 500})
    drain(Engine(store))
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {"a": "succeeded", "b": "failed", "c": "succeeded"}
    assert jobs_["b"].error.startswith("exit code 2: config_error: Configuration refused: ") and \
        "cannot fill grad_accum 500 micro-batches" in jobs_["b"].error, jobs_["b"].error
    assert jobs_["b"].diagnosis.cls == "config_error"
    assert len({store.attempts(j.id)[0].pid for j in jobs_.values()}) == 1  # one group, b in it
    assert all(store.attempts(j.id)[0].returncode == 0 for k, j in jobs_.items() if k != "b")

def test_a_member_whose_folder_does_not_take_its_group_file_fails_alone(tmp_path, base):
    """b's folder refuses the group's ref file (a directory stands where it goes; as a user other than
    root, a folder without write permission): b's launch fails naming that file, a and c train."""
    store, run_id = make_run(tmp_path, base, "true")
    b = by_key(store, run_id)["b"]
    Path(b.job_dir, ".lat", "attempt-1.exit.json.group").mkdir(parents=True)
    drain(Engine(store))
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {"a": "succeeded", "b": "failed", "c": "succeeded"}
    assert jobs_["b"].error.startswith("launch failed: ") and f"{b.job_dir}/.lat/attempt-1.exit.json.group" \
        in jobs_["b"].error, jobs_["b"].error
    a, c = (store.attempts(jobs_[k].id)[0] for k in "ac")
    assert a.pid == c.pid and AttemptFiles(a.exit_path).read_group_ref().job_ids == (jobs_["a"].id, jobs_["c"].id)

def test_kill_9_of_the_group_settles_every_member_with_a_reason(tmp_path, base):
    store, run_id = make_run(tmp_path, base, "true", **{k: LONG for k in MEMBERS})
    engine = Engine(store)
    drain(engine, until=lambda: stepped(by_key(store, run_id)["a"]))
    runner = psutil.Process(store.attempts(by_key(store, run_id)["a"].id)[0].pid)
    trainer, = [p for p in runner.children() if title_of(p.pid).startswith("lat group(3): ")]
    os.kill(trainer.pid, signal.SIGKILL)
    drain(engine)
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {k: "failed" for k in MEMBERS}
    for job in jobs_.values():
        assert "the fused group's process ended (exit -9)" in job.error, job.error
        assert store.attempts(job.id)[0].returncode == -9
        assert re.fullmatch(CLOSED + r"failed at step \d+/400: killed by SIGKILL.*", last_line(job))
    assert store.run(run_id).state == "finished"


OOM_GROUP = Path(__file__).resolve().parents[1] / "helpers" / "oom_group.py"


def oom_group_launch(argv, env, job_dir, exit_path, show_env=()):
    """The real launch, the trainer replaced by tests/helpers/oom_group.py (a fused group runs out
    of GPU memory, a job alone succeeds): no GPU needed to run a group out of memory."""
    return launch([sys.executable, str(OOM_GROUP), *argv], env, job_dir, exit_path, show_env)


def group_sizes(store, job) -> list[int]:
    """Each attempt's group size, from its group ref file (1: it ran alone)."""
    return [len(ref.job_ids) if (ref := AttemptFiles(a.exit_path).read_group_ref()) else 1 for a in store.attempts(job.id)]


def test_a_group_out_of_memory_is_retried_in_halves_down_to_jobs_alone(tmp_path, base):
    """4 members out of memory: requeued in groups of at most 2, which run out of memory too, then
    alone (the one slot runs one group at a time), where they succeed."""
    store, run_id = make_run(tmp_path, base, "true", {**MEMBERS, "d": ({"r": 4, "alpha": 8}, {"batch_size": 2}, 9)})
    drain(Engine(store, launch_fn=oom_group_launch))
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {k: "succeeded" for k in "abcd"}
    assert {k: group_sizes(store, j) for k, j in jobs_.items()} == {k: [4, 2, 1] for k in "abcd"}
    first, second = ({k: store.attempts(j.id)[n] for k, j in jobs_.items()} for n in (0, 1))
    assert len({a.pid for a in first.values()}) == 1 and all(a.returncode == 1 for a in first.values())
    assert len({a.pid for a in second.values()}) == 2 and all(a.returncode == 1 for a in second.values())
    assert all(store.attempts(j.id)[2].returncode == 0 for j in jobs_.values())
    for job in jobs_.values():
        history = [t.detail for t in store.transitions(run_id, job_id=job.id)]
        assert ("its fused group of 4 ran out of memory (cuda_oom): requeued to train in groups of at most 2"
                in history), history
        assert "its fused group of 2 ran out of memory (cuda_oom): requeued to run alone" in history, history
        assert JobDir(job.job_dir).read_group_limit().size == 1
        assert job.argv[-1] == "--overwrite" and job.attempts == 3
    assert store.run(run_id).state == "finished"


def test_a_member_that_did_not_run_out_of_memory_is_not_requeued(tmp_path, base):
    store, run_id = make_run(tmp_path, base, "true")
    (Path(by_key(store, run_id)["a"].job_dir) / "survives").touch()
    drain(Engine(store, launch_fn=oom_group_launch))
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {k: "succeeded" for k in MEMBERS}
    assert {k: group_sizes(store, j) for k, j in jobs_.items()} == {"a": [3], "b": [3, 1], "c": [3, 1]}
    assert JobDir(jobs_["a"].job_dir).read_group_limit() is None and jobs_["a"].argv[-1] != "--overwrite"
    assert JobDir(jobs_["b"].job_dir).read_group_limit().size == 1


def test_a_group_takes_one_slot(tmp_path, base):
    """Two slots: while the group of three runs, a job added later takes the second slot at once."""
    cpu2 = {**CPU, "slots": 2}
    store = Store(tmp_path / "state2" / "journal.sqlite")
    run_id = store.create_run("fuse: true\nwarm_start: false\n", str(tmp_path / "out2"), [cpu2], 0.0)
    store.add_jobs(run_id, jobs(tmp_path / "out2", base))
    engine = Engine(store)
    engine.tick()
    assert len(store.running_jobs(run_id)) == 3
    store.add_jobs(run_id, [fake_job(tmp_path, "z", sleep=0.3)])
    drain(engine)
    jobs_ = by_key(store, run_id)
    assert {j.state for j in jobs_.values()} == {"succeeded"}
    assert jobs_["z"].ended < min(jobs_[k].ended for k in MEMBERS)


def told(store, run_id, job) -> list[str]:
    return [t.detail for t in store.transitions(run_id, job_id=job.id)]


def processes_under(folder: Path) -> list[psutil.Process]:
    """Live processes that work in ``folder`` (a group runner and its trainer: their cwd is the
    first member's folder; their command lines are titles that name no folder)."""
    found = []
    for proc in psutil.process_iter(["pid", "cwd", "status"]):
        if proc.pid != os.getpid() and proc.info["status"] != psutil.STATUS_ZOMBIE \
                and (proc.info["cwd"] or "").startswith(str(folder)):
            found.append(proc)
    return found


def titles_still_running(procs: list[psutil.Process]) -> list[str]:
    """The titles of those of ``procs`` that have not begun to exit. A process listed a moment ago
    may be exiting since: once the kernel has freed its memory its cmdline reads "" (then it is a
    zombie, then gone), which says nothing of what it was; the wait that follows sees it end."""
    return [title for title in (title_of(p.pid) for p in procs) if title]


def test_cancelling_the_run_cancels_every_member_ends_the_group_and_frees_the_slot(tmp_path, base):
    store, run_id = make_run(tmp_path, base, "true", **{k: LONG for k in MEMBERS})
    engine = Engine(store)
    drain(engine, until=lambda: stepped(by_key(store, run_id)["a"]))
    assert processes_under(tmp_path)
    store.add_command(run_id, CancelRun())  # lat-tui cancel --all
    drain(engine)
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {k: "cancelled" for k in MEMBERS}
    assert all(j.error == "cancelled by user" and j.last_step < 400 for j in jobs_.values())
    assert store.run(run_id).state == "cancelled" and not store.open_attempts(run_id)
    left = processes_under(tmp_path)  # the trainer is gone; its runner may still be exiting after its record
    titles = titles_still_running(left)
    assert all(title.startswith("lat runner: ") for title in titles), titles
    assert not psutil.wait_procs(left, timeout=HANG_S)[1]
    store.add_command(run_id, AddJobs((fake_job(tmp_path, "z", sleep=0.1),)))
    drain(engine)
    assert by_key(store, run_id)["z"].state == "succeeded"  # the group's slot is free again


def test_a_group_process_that_outlives_its_last_member_is_killed_before_the_slot_frees(tmp_path, base, monkeypatch):
    """Every member left (exit 0) but the group's process hangs on: the last member stays open
    (the slot held) until the grace kills the group's tree; then the run drains with nothing left."""
    monkeypatch.setattr(groups, "GROUP_END_GRACE_S", 2.0)
    script = Path(__file__).resolve().parents[1] / "helpers" / "lingering_group.py"

    def launch_fn(argv, env, job_dir, exit_path, show_env=()):
        return launch([sys.executable, str(script), *argv], env, job_dir, exit_path, show_env)

    store, run_id = make_run(tmp_path, base, "true")
    engine = Engine(store, launch_fn=launch_fn)
    drain(engine, until=lambda: len(store.open_attempts(run_id)) == 1)
    last = store.open_attempts(run_id)[0]
    assert processes_under(tmp_path) and store.job(last.job_id).state == "running"
    drain(engine)
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {k: "succeeded" for k in MEMBERS}
    assert told(store, run_id, store.job(last.job_id)).count(
        "the group's process was still running 2 s after its last member left: killed") == 1
    left = processes_under(tmp_path)
    titles = titles_still_running(left)
    assert all(title.startswith("lat runner: ") for title in titles), titles
    assert not psutil.wait_procs(left, timeout=HANG_S)[1]


def test_a_journal_that_lost_a_finished_groups_attempts_launches_no_member_again(tmp_path, base):
    """Two slots: a member taken over leaves no slot for its mates to be launched in again."""
    store, run_id = make_run(tmp_path, base, "true", slots=2, b={"lr": 1e30})  # b fails, a and c succeed
    journal = Path(store.path)
    before = snapshot_journal(journal)
    drain(Engine(store))
    store.close()  # the engine dies; the journal loses its tail
    restore_journal(journal, before)
    store = Store(journal)
    assert {j.state for j in store.jobs(run_id)} == {"queued"}
    drain(Engine(store))
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {"a": "succeeded", "b": "failed", "c": "succeeded"}
    assert "exit code 1" in jobs_["b"].error, jobs_["b"].error
    for job in jobs_.values():
        assert len(store.attempts(job.id)) == 1 and len(events_of(Path(job.job_dir), Started)) == 1
        assert "settled from attempt-1's exit record (the journal had lost it): not launched again" \
            in told(store, run_id, job)


def journal_lost_a_running_group(tmp_path, base) -> tuple[Store, int]:
    """A group of MEMBERS launched and stepping, then the journal back as it was before the launch
    (the group's attempts lost): the store reopened on it, and the run."""
    store, run_id = make_run(tmp_path, base, "true", slots=2, **{k: {"max_steps": 40} for k in MEMBERS})
    journal = Path(store.path)
    before = snapshot_journal(journal)
    drain(Engine(store), until=lambda: stepped(by_key(store, run_id)["a"]))
    store.close()
    restore_journal(journal, before)
    return Store(journal), run_id


def test_a_journal_that_lost_a_running_groups_attempts_adopts_the_group(tmp_path, base):
    store, run_id = journal_lost_a_running_group(tmp_path, base)
    drain(Engine(store))
    jobs_ = by_key(store, run_id)
    assert {k: j.state for k, j in jobs_.items()} == {k: "succeeded" for k in MEMBERS}
    for job in jobs_.values():
        assert len(store.attempts(job.id)) == 1 and len(events_of(Path(job.job_dir), Started)) == 1
        assert any(d.startswith("adopted attempt-1, still running as pid ") for d in told(store, run_id, job)), \
            told(store, run_id, job)
    assert len({store.attempts(j.id)[0].pid for j in jobs_.values()}) == 1
