"""``lat-tui --plan`` with ``backend: slurm`` from a "login node" (this machine, no GPU, no NVML) on
the one-node cluster of ``scripts/slurm_local.sh``: what reaches Slurm is read back from Slurm
(``scontrol``/``sacct``), the time-limit warning saves and resumes, and an engine of another host
(another UTS namespace's hostname) is refused. Every wait is on a state, never a sleep's length."""

import subprocess
import sys
from pathlib import Path

import pytest

from lat_core.contract.states import JobState
from lat_core.front.service import open_store
from tests.helpers import slurm_front
from tests.helpers.slurm_front import (ENV, SAVED_AT_THE_LIMIT, cancel_the_run, config_tree, every_job_resumed, on_cpu,
                                       resumed_from, running, the_job, the_run)
from tests.integration.test_slurm import slurm_cluster  # noqa: F401  (fixture)


def lat_tui(tmp_path: Path, plan: dict, *, wait: bool = True):
    """The suite ``solo``: one tiny Mamba job."""
    configs = config_tree(tmp_path, "solo", ["mamba/tiny_lora.yaml"])
    return slurm_front.lat_tui(tmp_path, configs, {"suites": ["solo"], **plan}, wait=wait)


def slurm_tres(job_id) -> str:
    """What Slurm allocated the job: ``scontrol`` while it remembers it, else accounting."""
    shown = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True).stdout
    if "TRES=" in shown:
        return shown
    return subprocess.run(["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "AllocTRES"],
                          capture_output=True, text=True).stdout


@pytest.mark.slow
def test_a_two_process_job_asks_slurm_for_two_gpus_from_a_login_node(slurm_cluster, tmp_path):  # noqa: F811
    done = lat_tui(tmp_path, {"gpus_per_job": 2, "slurm": {"time": "10", "max_jobs": 4}})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1/1 jobs succeeded" in done.stdout
    store = open_store(tmp_path / "state")
    [job] = store.jobs(store.runs()[0].id)
    assert job.world == 2 and job.device == "slurm"
    [attempt] = store.attempts(job.id)
    assert "gres/gpu=2" in slurm_tres(attempt.pid)  # Slurm's own record of the request
    script = Path(attempt.exit_path).with_name("attempt-1.sbatch").read_text()
    assert "lat_core.train.torchrun --standalone --nnodes=1 --nproc_per_node=2" in script
    assert "master_port" not in script  # no port of this host decided for the job's node
    log = (Path(job.job_dir) / "train.log").read_text()
    assert "finished" in log


@pytest.mark.slow
def test_a_time_limited_job_saves_and_resumes_and_another_host_is_refused(slurm_cluster, tmp_path):  # noqa: F811
    state = tmp_path / "state"
    with running(lat_tui(tmp_path, on_cpu(SAVED_AT_THE_LIMIT), wait=False)) as front:
        store, run_id = the_run(tmp_path)
        job = the_job(store, run_id)
        job_dir = Path(job.job_dir)
        # the first attempt saves at Slurm's warning; the engine resubmits it with --resume
        every_job_resumed(store, run_id, jobs=1)
        refused = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname login2 && exec "$@"', "sh",
                                  sys.executable, "-m", "lat_core.engine", "--state-dir", str(state)],
                                 env=ENV, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "of another host serves this state directory" in refused.stdout
        assert not (state / "engine.fault").exists()
        cancel_the_run(store, run_id, front)
    job = store.job(job.id)
    first = store.attempts(job.id)[0]
    assert first.returncode == 75  # the trainer's "saved to be resumed"
    requeued = [t.detail for t in store.transitions(run_id, job_id=job.id) if t.new_state == JobState.QUEUED][1:]
    assert requeued[0].startswith("saved at step ") and "resubmitted to resume" in requeued[0], requeued
    saved_step = int(requeued[0].split()[3])
    assert resumed_from(job_dir)[:2] == [None, saved_step] and "--resume" in job.argv
    log = (job_dir / "train.log").read_text()
    assert "asked to save and stop (SIGUSR1)" in log and " stopped to resume at step " in log
