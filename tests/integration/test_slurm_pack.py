"""Warm packs on Slurm, through ``lat-tui --plan`` with ``backend: slurm, fuse: false, slurm.pack: 3``
on the one-node cluster of ``scripts/slurm_local.sh`` (CPU jobs: ``gres: none``): three jobs that do
not fuse go out as one Slurm job whose process imports the training stack once and forks each;
each keeps its own attempt, exit record, results, failure and cancel. What reached Slurm is read
back from Slurm. Every wait is on a state, never a sleep's length."""

from pathlib import Path

import pytest

from lat_core.contract.jobdir import AttemptFiles, Finished, JobDir
from lat_core.contract.states import HistoryKind
from lat_core.engine.backends.slurm import SlurmBackend, find_submitted, job_name_for
from lat_core.front.service import open_store
from tests.helpers import slurm_front
from tests.helpers.slurm_front import (SAVED_AT_THE_LIMIT, TINY_GLA, UNTIL_STOPPED, a_member_cancelled, by_stem,
                                       config_tree, on_cpu, resumed_from, resumed_then_cancelled, running, sacct_name,
                                       scancelled, slurm_jobs_of, the_engine_killed_and_back)
from tests.integration.test_slurm import slurm_cluster  # noqa: F401  (fixture)

FORKED = "[lat] warm start: forked from the preloaded process"


def lat_tui(tmp_path: Path, experiments: list[str], plan: dict, *, wait: bool = True):
    """The suite ``sp_pack`` of ``experiments`` (which may name ``sp/bad_target.yaml``), unfused, as CPU
    jobs three to a Slurm job."""
    configs = config_tree(tmp_path, "sp_pack", experiments, bad_target_in="sp")
    return slurm_front.lat_tui(tmp_path, configs, on_cpu({"suites": ["sp_pack"], "fuse": False, **plan}, pack=3),
                               wait=wait)


@pytest.mark.slow
def test_three_unfused_jobs_share_one_slurm_job_and_a_bad_one_fails_alone(slurm_cluster, tmp_path):  # noqa: F811
    done = lat_tui(tmp_path, [*TINY_GLA[:2], "sp/bad_target.yaml"], {})
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
    with running(lat_tui(tmp_path, TINY_GLA, {"overrides": UNTIL_STOPPED}, wait=False)) as front:
        store, run_id, slurm_id, b = a_member_cancelled(tmp_path, "tiny_rslora")
        assert {j.state for j in store.jobs(run_id) if j.id != b.id} == {"running"}
        assert SlurmBackend().is_alive(slurm_id, None)  # the pack's job goes on for a and c
        the_engine_killed_and_back(tmp_path, watched=by_stem(store, run_id)["tiny_lora_qkvo"])
        scancelled(slurm_id, front)
    jobs = by_stem(store, run_id)
    assert jobs["tiny_rslora"].error == "cancelled by user"
    assert store.attempts(b.id)[0].returncode == -15
    for stem in ("tiny_lora_qkvo", "tiny_lora_accum"):  # Slurm's word on the pack: theirs
        job = jobs[stem]
        assert job.state == "failed" and job.diagnosis.cls == "cancelled", job.error
        assert job.diagnosis.title == "Cancelled in Slurm" and str(slurm_id) in job.diagnosis.diagnosis
    assert slurm_jobs_of(store, run_id) == {slurm_id} and all(j.attempts == 1 for j in jobs.values())  # adopted
    assert "[lat pack] job %d: cancelled" % b.id in (Path(jobs["tiny_lora_qkvo"].job_dir) / "train.log").read_text()


@pytest.mark.slow
def test_a_time_limited_pack_passes_the_warning_to_every_member_and_they_resume_as_a_pack(  # noqa: F811
        slurm_cluster, tmp_path):
    """Slurm warns the pack's job 50 s before its 1-minute limit: the pack's process passes SIGUSR1
    on to each member, which saves at its last step and leaves with 75; the engine resubmits them
    with --resume once all have saved, as one pack again, and each trains on from its checkpoint."""
    with running(lat_tui(tmp_path, TINY_GLA, SAVED_AT_THE_LIMIT, wait=False)) as front:
        store, run_id = resumed_then_cancelled(tmp_path, front, jobs=3)
    firsts = [store.attempts(j.id)[0] for j in store.jobs(run_id)]
    assert len({a.pid for a in firsts}) == 1 and {a.returncode for a in firsts} == {75}
    seconds = {store.attempts(j.id)[1].pid for j in store.jobs(run_id)}  # resubmitted together: one pack again
    assert len(seconds) == 1 and seconds != {firsts[0].pid}
    for job in store.jobs(run_id):
        saved = resumed_from(job.job_dir)[1]
        assert saved and "--resume" in store.job(job.id).argv
        log = (Path(job.job_dir) / "train.log").read_text()
        assert f"asked to save and stop (SIGUSR1): checkpoint at step {saved}" in log
