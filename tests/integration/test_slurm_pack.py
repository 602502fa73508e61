"""Warm packs on Slurm, through ``lat-tui --plan`` with ``backend: slurm, fuse: false, slurm.pack: 3``
on the one-node cluster of ``scripts/slurm_local.sh`` (CPU jobs: ``gres: none``): three jobs that do
not fuse go out as one Slurm job whose process imports the training stack once and forks each;
each keeps its own attempt, exit record, results, failure and cancel. What reached Slurm is read
back from Slurm. Every wait is on a state, never a sleep's length."""

import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from lat_core.contract.commands import CancelJob, CancelRun
from lat_core.contract.jobdir import AttemptFiles, Finished, JobDir, Started, Step
from lat_core.contract.state_dir import EngineLock
from lat_core.contract.states import HistoryKind
from lat_core.engine.backends.slurm import SlurmBackend, find_submitted, job_name_for
from lat_core.front.service import open_store
from tests.integration.test_slurm import slurm_cluster  # noqa: F401  (fixture)
from tests.integration.test_slurm_front_door import ENV, LAT_TUI, wait_until
from tests.integration.test_slurm_fused import SHIPPED, by_stem, sacct_name, slurm_jobs_of, the_run

GOOD = ["gla/tiny_lora_qkvo.yaml", "gla/tiny_rslora.yaml", "gla/tiny_lora_accum.yaml"]
LONG = {"train": {"max_steps": 1000000, "eval_every": 1000000, "save_every": 1000000}}
FORKED = "[lat] warm start: forked from the preloaded process"


def config_tree(tmp_path: Path, experiments: list[str]) -> Path:
    """A suite of ``experiments``; ``sp/bad_target.yaml`` is tiny_lora_qkvo on a module the base lacks."""
    root = tmp_path / "configs"
    (root / "suites").mkdir(parents=True)
    (root / "experiments" / "sp").mkdir(parents=True)
    bad = yaml.safe_load((SHIPPED / "gla" / "tiny_lora_qkvo.yaml").read_text())
    bad["name"], bad["peft"]["target_modules"] = "sp_bad_target", ["q_proj", "nope_proj"]
    (root / "experiments" / "sp" / "bad_target.yaml").write_text(yaml.safe_dump(bad))
    (root / "suites" / "sp_pack.yaml").write_text(yaml.safe_dump({"rounds": {1: experiments}}))
    return root


def lat_tui(tmp_path: Path, experiments: list[str], plan: dict, *, wait: bool = True):
    path = tmp_path / "plan.yaml"
    slurm = {"gres": "none", "time": "10", "pack": 3, **plan.pop("slurm", {})}  # CPU jobs on the fake-GPU node
    path.write_text(yaml.safe_dump({"suites": ["sp_pack"], "pairs": ["1:tiny-sst2"], "backend": "slurm",
                                    "fuse": False, "slurm": slurm, "output_root": str(tmp_path / "runs"), **plan}))
    argv = [*LAT_TUI, "--plan", str(path), "--configs", str(config_tree(tmp_path, experiments)),
            "--state-dir", str(tmp_path / "state")]
    if wait:
        return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=900)
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stepping(job, n: int = 2) -> bool:
    return JobDir(job.job_dir).events_path.is_file() and len(JobDir(job.job_dir).read_events().of(Step)) >= n


@pytest.mark.slow
def test_three_unfused_jobs_share_one_slurm_job_and_a_bad_one_fails_alone(slurm_cluster, tmp_path):  # noqa: F811
    done = lat_tui(tmp_path, [*GOOD[:2], "sp/bad_target.yaml"], {})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # one job failed
    assert "2/3 jobs succeeded" in done.stdout
    store = open_store(tmp_path / "state")
    run_id = store.runs()[0].id
    jobs = by_stem(store, run_id)
    [slurm_id] = slurm_jobs_of(store, run_id)  # three attempts, one Slurm job
    ref = AttemptFiles(store.attempts(jobs["tiny_lora_qkvo"].id)[0].exit_path).read_group_ref()
    assert ref.pack and sacct_name(slurm_id) == job_name_for(ref.exit_path)  # the pack's job
    since = store.run(run_id).created
    for job in jobs.values():  # no member went to Slurm as a job of its own
        [attempt] = store.attempts(job.id)
        assert find_submitted(job_name_for(attempt.exit_path), since=since) is None
    said = [t.detail for t in store.transitions(run_id) if t.new_state == HistoryKind.WARM_START]
    ids = ", ".join(str(j.id) for j in sorted(jobs.values(), key=lambda j: j.seq))
    assert said[0] == SlurmBackend(pack=3).warm_history()  # the run's: once
    assert said[1:] == [f"pack {ref.group_id}: jobs {ids} share one Slurm job ({slurm_id}; "
                        "warm start: torch & co. imported once)"] * 3
    for stem in ("tiny_lora_qkvo", "tiny_rslora"):  # each with its own results, forked from the pack
        job = jobs[stem]
        assert job.state == "succeeded" and job.last_step == 40
        folder = JobDir(job.job_dir)
        assert folder.attempt(1).read_exit().returncode == 0 and folder.read_events().of(Finished)
        assert (Path(job.job_dir) / "final").is_dir()
        assert FORKED in (Path(job.job_dir) / "train.log").read_text()
    bad = jobs["bad_target"]
    assert bad.state == "failed" and bad.diagnosis.cls == "config_error", bad.error
    assert JobDir(bad.job_dir).attempt(1).read_exit().returncode == 2
    assert FORKED in (Path(bad.job_dir) / "train.log").read_text()
    assert SlurmBackend().final_state(slurm_id, wait_s=10)["state"] in ("COMPLETED", "FAILED")


@pytest.mark.slow
def test_a_cancelled_member_of_a_pack_is_cancelled_alone_and_a_restarted_engine_adopts_the_pack(  # noqa: F811
        slurm_cluster, tmp_path):
    """b is cancelled through its marker (the pack's process sends its runner SIGTERM), a and c train
    on; the engine dies (SIGKILL), the front end restarts it and it adopts the pack; an admin's
    scancel ends the pack: Slurm's word is a's and c's."""
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
        assert SlurmBackend().is_alive(slurm_id, None)  # the pack's job goes on for a and c
        state = tmp_path / "state"
        engine = EngineLock(state).holder().pid
        os.kill(engine, signal.SIGKILL)
        wait_until(lambda: (h := EngineLock(state).holder()) and h.pid != engine and EngineLock(state).is_held(),
                   "the engine restarted by the front end")
        a = by_stem(store, run_id)["tiny_lora_qkvo"]
        now = len(JobDir(a.job_dir).read_events().of(Step))
        wait_until(lambda: len(JobDir(a.job_dir).read_events().of(Step)) > now, "a training on")
        subprocess.run(["scancel", str(slurm_id)], check=True)  # an admin, not LAT
        front.communicate(timeout=300)
    finally:
        if front.poll() is None:
            front.kill()
    jobs = by_stem(store, run_id)
    assert jobs["tiny_rslora"].error == "cancelled by user"
    assert store.attempts(b.id)[0].returncode == -15
    for stem in ("tiny_lora_qkvo", "tiny_lora_accum"):  # Slurm's word on the pack: theirs
        job = jobs[stem]
        assert job.state == "failed" and job.diagnosis.cls == "cancelled", job.error
        assert job.diagnosis.title == "Cancelled in Slurm" and str(slurm_id) in job.diagnosis.diagnosis
    assert slurm_jobs_of(store, run_id) == {slurm_id} and all(j.attempts == 1 for j in jobs.values())  # adopted
    assert "[lat pack] job %d: cancelled" % b.id in (Path(jobs["tiny_lora_qkvo"].job_dir) / "train.log").read_text()


def resumed_from(job) -> list:
    return [e.resumed_from for e in JobDir(job.job_dir).read_events().of(Started)]


@pytest.mark.slow
def test_a_time_limited_pack_passes_the_warning_to_every_member_and_they_resume_as_a_pack(  # noqa: F811
        slurm_cluster, tmp_path):
    """Slurm warns the pack's job 50 s before its 1-minute limit: the pack's process passes SIGUSR1
    on to each member, which saves at its last step and leaves with 75; the engine resubmits them
    with --resume once all have saved, as one pack again, and each trains on from its checkpoint."""
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
    seconds = {store.attempts(j.id)[1].pid for j in store.jobs(run_id)}  # resubmitted together: one pack again
    assert len(seconds) == 1 and seconds != {firsts[0].pid}
    for job in store.jobs(run_id):
        saved = resumed_from(job)[1]
        assert saved and "--resume" in store.job(job.id).argv
        log = (Path(job.job_dir) / "train.log").read_text()
        assert f"asked to save and stop (SIGUSR1): checkpoint at step {saved}" in log
