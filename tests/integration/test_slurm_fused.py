"""Fused groups on Slurm, through ``lat-tui --plan`` with ``backend: slurm, fuse: true`` on the
one-node cluster of ``scripts/slurm_local.sh`` (CPU jobs: ``gres: none``): same-base tiny GLA jobs
go out as one Slurm job running the fused trainer; each member keeps its own attempt, exit record,
results, failure and cancel; Slurm's word on the group's job is every member's still in it; an
engine killed mid-run is restarted and adopts the group. What reached Slurm is read back from
Slurm. Every wait is on a state, never a sleep's length."""

import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from lat_core.contract.commands import CancelJob, CancelRun
from lat_core.contract.jobdir import AttemptFiles, Finished, JobDir, Started, Step
from lat_core.contract.states import HistoryKind
from lat_core.contract.state_dir import EngineLock
from lat_core.contract.journal import Store
from lat_core.engine.backends.slurm import SlurmBackend, find_submitted, job_name_for
from lat_core.engine.loop import Engine
from lat_core.front.service import open_store
from tests.helpers.fused import saved_tiny_base
from tests.integration.test_engine_fused import jobs as fused_jobs
from tests.integration.test_slurm import drain, slurm_cluster  # noqa: F401  (fixture)
from tests.integration.test_slurm_front_door import ENV, LAT_TUI, wait_until

GOOD = ["gla/tiny_lora_qkvo.yaml", "gla/tiny_rslora.yaml", "gla/tiny_lora_accum.yaml"]  # one tiny base: they fuse
LONG = {"train": {"max_steps": 1000000, "eval_every": 1000000, "save_every": 1000000}}
SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "experiments"


def config_tree(tmp_path: Path, experiments: list[str]) -> Path:
    """A suite of ``experiments``; ``sf/bad_target.yaml`` is tiny_lora_qkvo on a module the base lacks
    (it still fuses: the fuse key does not read target modules; the group finds it as it builds)."""
    root = tmp_path / "configs"
    (root / "suites").mkdir(parents=True)
    (root / "experiments" / "sf").mkdir(parents=True)
    bad = yaml.safe_load((SHIPPED / "gla" / "tiny_lora_qkvo.yaml").read_text())
    bad["name"], bad["peft"]["target_modules"] = "sf_bad_target", ["q_proj", "nope_proj"]
    (root / "experiments" / "sf" / "bad_target.yaml").write_text(yaml.safe_dump(bad))
    (root / "suites" / "sf_fused.yaml").write_text(yaml.safe_dump({"rounds": {1: experiments}}))
    return root


def lat_tui(tmp_path: Path, experiments: list[str], plan: dict, *, wait: bool = True):
    path = tmp_path / "plan.yaml"
    slurm = {"gres": "none", "time": "10", **plan.pop("slurm", {})}  # CPU jobs on the fake-GPU node
    path.write_text(yaml.safe_dump({"suites": ["sf_fused"], "pairs": ["1:tiny-sst2"], "backend": "slurm",
                                    "fuse": True, "slurm": slurm, "output_root": str(tmp_path / "runs"), **plan}))
    argv = [*LAT_TUI, "--plan", str(path), "--configs", str(config_tree(tmp_path, experiments)),
            "--state-dir", str(tmp_path / "state")]
    if wait:
        return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=900)
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def the_run(tmp_path: Path):
    state = tmp_path / "state"
    store = wait_until(lambda: (state / "journal.sqlite").exists() and open_store(state), "the journal")
    run_id = wait_until(lambda: store.runs() and store.runs()[0].id, "the run")
    return store, run_id


def by_stem(store, run_id):
    return {j.stem: j for j in store.jobs(run_id)}


def slurm_jobs_of(store, run_id) -> set:
    """The Slurm job ids the run's attempts went into."""
    return {a.pid for j in store.jobs(run_id) for a in store.attempts(j.id)}


def sacct_name(job_id) -> str:
    """The Slurm job's name, from accounting (slurmdbd records a job a moment after it is submitted)."""
    def named():
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobName"],
                             capture_output=True, text=True).stdout.split()
        return out[0] if out else None
    return wait_until(named, f"Slurm job {job_id} in sacct")


def stepping(job, n: int = 2) -> bool:
    return JobDir(job.job_dir).events_path.is_file() and len(JobDir(job.job_dir).read_events().of(Step)) >= n


@pytest.mark.slow
def test_three_jobs_go_out_as_one_slurm_job_and_a_bad_member_fails_alone(slurm_cluster, tmp_path):  # noqa: F811
    done = lat_tui(tmp_path, [*GOOD, "sf/bad_target.yaml"], {})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # one job failed
    assert "3/4 jobs succeeded" in done.stdout
    store = open_store(tmp_path / "state")
    run_id = store.runs()[0].id
    jobs = by_stem(store, run_id)
    [slurm_id] = slurm_jobs_of(store, run_id)  # four attempts, one Slurm job
    group_exit = AttemptFiles(store.attempts(jobs["tiny_lora_qkvo"].id)[0].exit_path).read_group_ref().exit_path
    assert sacct_name(slurm_id) == job_name_for(group_exit)  # the group's job: the fused trainer's
    since = store.run(run_id).created
    for job in jobs.values():  # no member went to Slurm as a job of its own
        [attempt] = store.attempts(job.id)
        assert find_submitted(job_name_for(attempt.exit_path), since=since) is None
    fused = [t.detail for t in store.transitions(run_id) if t.new_state == HistoryKind.FUSED]
    assert fused and all(f"as Slurm job {slurm_id}" in said for said in fused)
    for stem in ("tiny_lora_qkvo", "tiny_rslora", "tiny_lora_accum"):  # each with its own results
        job = jobs[stem]
        assert job.state == "succeeded" and job.last_step == 40
        folder = JobDir(job.job_dir)
        assert folder.attempt(1).read_exit().returncode == 0 and folder.read_events().of(Finished)
        assert (Path(job.job_dir) / "final").is_dir()
        assert "left the group: finished (exit 0)" in (Path(job.job_dir) / "train.log").read_text()
    bad = jobs["bad_target"]
    assert bad.state == "failed" and bad.diagnosis.cls == "config_error", bad.error
    assert "no linear module named 'nope_proj'" in bad.error
    assert JobDir(bad.job_dir).attempt(1).read_exit().returncode == 2
    assert SlurmBackend().final_state(slurm_id, wait_s=10)["state"] in ("COMPLETED", "FAILED")
    cold = [t.detail for t in store.transitions(run_id) if t.new_state == HistoryKind.WARM_START]
    assert cold == [f"not used: {SlurmBackend().why_cold()}"]  # said once, for the run


@pytest.mark.slow
def test_cancel_of_a_member_an_engine_restart_and_slurms_cancel_of_the_group(slurm_cluster, tmp_path):  # noqa: F811
    """b is cancelled through its marker, a and c train on; the engine dies (SIGKILL), the front end
    restarts it and it adopts the group; an admin's scancel ends the group: Slurm's word is a's and c's."""
    front = lat_tui(tmp_path, GOOD, {"overrides": LONG}, wait=False)
    try:
        store, run_id = the_run(tmp_path)
        wait_until(lambda: len(store.jobs(run_id)) == 3 and all(stepping(j) for j in store.jobs(run_id)),
                   "three members training")
        [slurm_id] = slurm_jobs_of(store, run_id)
        b = by_stem(store, run_id)["tiny_rslora"]
        store.add_command(run_id, CancelJob(b.id))
        wait_until(lambda: store.job(b.id).state == "cancelled", "b cancelled")
        assert {j.state for j in store.jobs(run_id) if j.id != b.id} == {"running"}
        assert SlurmBackend().is_alive(slurm_id, None)  # the group's job goes on for a and c
        state = tmp_path / "state"
        engine = EngineLock(state).holder().pid
        os.kill(engine, signal.SIGKILL)
        wait_until(lambda: (h := EngineLock(state).holder()) and h.pid != engine and EngineLock(state).is_held(),
                   "the engine restarted by the front end")
        started = {j.id: len(JobDir(j.job_dir).read_events().of(Step)) for j in store.jobs(run_id)}
        a = by_stem(store, run_id)["tiny_lora_qkvo"]
        wait_until(lambda: len(JobDir(a.job_dir).read_events().of(Step)) > started[a.id], "a training on")
        subprocess.run(["scancel", str(slurm_id)], check=True)  # an admin, not LAT
        front.communicate(timeout=300)
    finally:
        if front.poll() is None:
            front.kill()
    jobs = by_stem(store, run_id)
    assert jobs["tiny_rslora"].error == "cancelled by user"
    assert store.attempts(b.id)[0].returncode == -15  # its marker: it left the group as if SIGTERM ended it alone
    for stem in ("tiny_lora_qkvo", "tiny_lora_accum"):
        job = jobs[stem]
        assert job.state == "failed" and job.diagnosis.cls == "cancelled", job.error
        assert job.diagnosis.title == "Cancelled in Slurm" and str(slurm_id) in job.diagnosis.diagnosis
    assert slurm_jobs_of(store, run_id) == {slurm_id} and all(j.attempts == 1 for j in jobs.values())  # adopted


@pytest.mark.slow
def test_cancelling_the_run_while_its_group_waits_in_slurm_cancels_every_member(slurm_cluster, tmp_path):  # noqa: F811
    front = lat_tui(tmp_path, GOOD, {"slurm": {"extra_args": ["--begin=now+3600"]}}, wait=False)
    try:
        store, run_id = the_run(tmp_path)
        wait_until(lambda: (ids := slurm_jobs_of(store, run_id)) and None not in ids and len(store.jobs(run_id)) == 3,
                   "the group submitted")
        [slurm_id] = slurm_jobs_of(store, run_id)
        assert SlurmBackend().queue_state(slurm_id) == "PENDING"
        store.add_command(run_id, CancelRun())
        front.communicate(timeout=300)
    finally:
        if front.poll() is None:
            front.kill()
    assert store.run(run_id).state == "cancelled"
    assert {j.state for j in store.jobs(run_id)} == {"cancelled"}
    assert SlurmBackend().final_state(slurm_id, wait_s=10)["state"] == "CANCELLED"
    assert not any(JobDir(j.job_dir).events_path.exists() for j in store.jobs(run_id))  # it never ran


CLUSTER = {"id": "slurm", "label": "Slurm (4 jobs at once)", "slots": 4, "env": {"CUDA_VISIBLE_DEVICES": ""}}


class _Died(BaseException):
    """The engine's death right after the group went to Slurm, before a member's job id was recorded."""


def _die(*_args, **_kwargs):
    raise _Died()


@pytest.mark.slow
def test_an_engine_that_died_before_recording_the_groups_job_id_finds_it_by_the_groups_name(  # noqa: F811
        slurm_cluster, tmp_path, monkeypatch):
    base = saved_tiny_base(tmp_path / "base")
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("fuse: true\nwarm_start: false\n", str(tmp_path / "out"), [CLUSTER], 0.0)
    store.add_jobs(run_id, fused_jobs(tmp_path / "out", base))
    monkeypatch.setattr(store, "set_attempt_pid", _die)
    with pytest.raises(_Died):
        Engine(store, backend=SlurmBackend()).tick()
    monkeypatch.undo()
    attempts = [a for j in store.jobs(run_id) for a in store.attempts(j.id)]
    assert len(attempts) == 3 and all(a.pid is None for a in attempts)  # submitted, never recorded
    drain(Engine(store, backend=SlurmBackend()), timeout=300)
    assert {j.state for j in store.jobs(run_id)} == {"succeeded"}
    [slurm_id] = slurm_jobs_of(store, run_id)  # each member's attempt adopted the one group job
    assert slurm_id is not None, "no member's attempt found the group's Slurm job"
    assert all(j.attempts == 1 for j in store.jobs(run_id))
    assert sacct_name(slurm_id) == job_name_for(AttemptFiles(attempts[0].exit_path).read_group_ref().exit_path)


def resumed_from(job) -> list:
    return [e.resumed_from for e in JobDir(job.job_dir).read_events().of(Started)]


@pytest.mark.slow
def test_a_time_limited_group_saves_every_member_and_resumes_them(slurm_cluster, tmp_path):  # noqa: F811
    """Slurm warns the group's job 50 s before its 1-minute limit: each member saves at its last
    step and leaves with 75; the engine resubmits them with --resume once all have saved, as one
    group again, and each trains on from its own checkpoint."""
    front = lat_tui(tmp_path, GOOD, {"overrides": LONG, "slurm": {"time": "1", "save_before_end_s": 50}}, wait=False)
    try:
        store, run_id = the_run(tmp_path)
        wait_until(lambda: len(store.jobs(run_id)) == 3 and all(len(resumed_from(j)) == 2 for j in store.jobs(run_id)),
                   "every member resumed")
        store.add_command(run_id, CancelRun())
        front.communicate(timeout=300)
    finally:
        if front.poll() is None:
            front.kill()
    firsts = [store.attempts(j.id)[0] for j in store.jobs(run_id)]
    assert len({a.pid for a in firsts}) == 1 and {a.returncode for a in firsts} == {75}
    seconds = {store.attempts(j.id)[1].pid for j in store.jobs(run_id)}  # resubmitted together: one group again
    assert len(seconds) == 1 and seconds != {firsts[0].pid}
    for job in store.jobs(run_id):
        requeued = [t.detail for t in store.transitions(run_id, job_id=job.id) if t.new_state == "queued"][1:]
        assert requeued and requeued[0].startswith("saved at step ") and "resubmitted to resume" in requeued[0]
        saved = int(requeued[0].split()[3])
        assert resumed_from(job)[:2] == [None, saved] and "--resume" in store.job(job.id).argv
        log = (Path(job.job_dir) / "train.log").read_text()
        assert f"asked to save and stop (SIGUSR1): checkpoint at step {saved}" in log
        assert " stopped to resume at step " in log
