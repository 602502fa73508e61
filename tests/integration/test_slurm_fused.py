"""Fused groups on Slurm, through ``lat-tui --plan`` with ``backend: slurm, fuse: true`` on the
one-node cluster of ``scripts/slurm_local.sh`` (CPU jobs: ``gres: none``): same-base tiny GLA jobs
go out as one Slurm job running the fused trainer; each member keeps its own attempt, exit record,
results, failure and cancel; Slurm's word on the group's job is every member's still in it; an
engine killed mid-run is restarted and adopts the group. What reached Slurm is read back from
Slurm. Every wait is on a state, never a sleep's length."""

from pathlib import Path

import pytest

from lat_core.contract.jobdir import AttemptFiles, Finished, JobDir
from lat_core.contract.states import HistoryKind
from lat_core.contract.journal import Store
from lat_core.engine.backends.slurm import SlurmBackend, find_submitted, job_name_for
from lat_core.engine.loop import Engine
from lat_core.front.service import open_store
from tests.helpers import slurm_front
from tests.helpers.fused import saved_tiny_base
from tests.helpers.slurm_front import (SAVED_AT_THE_LIMIT, TINY_GLA, UNTIL_STOPPED, a_member_cancelled, by_stem,
                                       cancel_the_run, config_tree, on_cpu, resumed_from, resumed_then_cancelled,
                                       running, sacct_name, scancelled, slurm_jobs_of, the_engine_killed_and_back,
                                       the_run)
from tests.helpers.waits import wait_until
from tests.integration.test_engine_fused import jobs as fused_jobs
from tests.integration.test_slurm import drain, slurm_cluster  # noqa: F401  (fixture)


def lat_tui(tmp_path: Path, experiments: list[str], plan: dict, *, wait: bool = True):
    """The suite ``sf_fused`` of ``experiments`` (which may name ``sf/bad_target.yaml``), fused, as CPU jobs."""
    configs = config_tree(tmp_path, "sf_fused", experiments, bad_target_in="sf")
    return slurm_front.lat_tui(tmp_path, configs, on_cpu({"suites": ["sf_fused"], "fuse": True, **plan}), wait=wait)


@pytest.mark.slow
def test_three_jobs_go_out_as_one_slurm_job_and_a_bad_member_fails_alone(slurm_cluster, tmp_path):  # noqa: F811
    done = lat_tui(tmp_path, [*TINY_GLA, "sf/bad_target.yaml"], {})
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
    with running(lat_tui(tmp_path, TINY_GLA, {"overrides": UNTIL_STOPPED}, wait=False)) as front:
        store, run_id, slurm_id, b = a_member_cancelled(tmp_path, "tiny_rslora")
        assert {j.state for j in store.jobs(run_id) if j.id != b.id} == {"running"}
        assert SlurmBackend().is_alive(slurm_id, None)  # the group's job goes on for a and c
        the_engine_killed_and_back(tmp_path, watched=by_stem(store, run_id)["tiny_lora_qkvo"])
        scancelled(slurm_id, front)
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
    with running(lat_tui(tmp_path, TINY_GLA, {"slurm": {"extra_args": ["--begin=now+3600"]}}, wait=False)) as front:
        store, run_id = the_run(tmp_path)
        wait_until(lambda: (ids := slurm_jobs_of(store, run_id)) and None not in ids and len(store.jobs(run_id)) == 3,
                   "the group submitted", every=slurm_front.LOOK_EVERY_S)
        [slurm_id] = slurm_jobs_of(store, run_id)
        assert SlurmBackend().queue_state(slurm_id) == "PENDING"
        cancel_the_run(store, run_id, front)
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


@pytest.mark.slow
def test_a_time_limited_group_saves_every_member_and_resumes_them(slurm_cluster, tmp_path):  # noqa: F811
    """Slurm warns the group's job 50 s before its 1-minute limit: each member saves at its last
    step and leaves with 75; the engine resubmits them with --resume once all have saved, as one
    group again, and each trains on from its own checkpoint."""
    with running(lat_tui(tmp_path, TINY_GLA, SAVED_AT_THE_LIMIT, wait=False)) as front:
        store, run_id = resumed_then_cancelled(tmp_path, front, jobs=3)
    firsts = [store.attempts(j.id)[0] for j in store.jobs(run_id)]
    assert len({a.pid for a in firsts}) == 1 and {a.returncode for a in firsts} == {75}
    seconds = {store.attempts(j.id)[1].pid for j in store.jobs(run_id)}  # resubmitted together: one group again
    assert len(seconds) == 1 and seconds != {firsts[0].pid}
    for job in store.jobs(run_id):
        requeued = [t.detail for t in store.transitions(run_id, job_id=job.id) if t.new_state == "queued"][1:]
        assert requeued and requeued[0].startswith("saved at step ") and "resubmitted to resume" in requeued[0]
        saved = int(requeued[0].split()[3])
        assert resumed_from(job.job_dir)[:2] == [None, saved] and "--resume" in store.job(job.id).argv
        log = (Path(job.job_dir) / "train.log").read_text()
        assert f"asked to save and stop (SIGUSR1): checkpoint at step {saved}" in log
        assert " stopped to resume at step " in log
