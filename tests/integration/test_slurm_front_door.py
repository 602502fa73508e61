"""``lat-tui --plan`` with ``backend: slurm`` from a "login node" (this machine, no GPU, no NVML) on
the one-node cluster of ``scripts/slurm_local.sh``: what reaches Slurm is read back from Slurm
(``scontrol``/``sacct``), the time-limit warning saves and resumes, and an engine of another host
(another UTS namespace's hostname) is refused. Every wait is on a state, never a sleep's length."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lat_core.contract.commands import CancelRun
from lat_core.contract.jobdir import JobDir, Started
from lat_core.contract.states import JobState
from lat_core.front.service import open_store
from tests.integration.test_slurm import slurm_cluster  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
# the installed entry point (it imports this tree through PYTHONPATH), or what it runs
LAT_TUI = [str(Path(sys.executable).with_name("lat-tui"))] if Path(sys.executable).with_name("lat-tui").exists() \
    else [sys.executable, "-c", "import sys; from lat_tui.cli import main; sys.exit(main())"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NUM_DATA_WORKERS": "0"}


def config_tree(tmp_path: Path) -> Path:
    """A config tree with one suite of one tiny Mamba job (the shipped experiments are searched too)."""
    root = tmp_path / "configs"
    (root / "suites").mkdir(parents=True)
    (root / "suites" / "solo.yaml").write_text(yaml.safe_dump({"rounds": {1: ["mamba/tiny_lora.yaml"]}}))
    return root


def lat_tui(tmp_path: Path, plan: dict, *, wait: bool = True):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"suites": ["solo"], "pairs": ["1:tiny-sst2"], "backend": "slurm",
                                    "output_root": str(tmp_path / "runs"), **plan}))
    argv = [*LAT_TUI, "--plan", str(path), "--configs", str(config_tree(tmp_path)),
            "--state-dir", str(tmp_path / "state")]
    if wait:
        return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=900)
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def slurm_tres(job_id) -> str:
    """What Slurm allocated the job: ``scontrol`` while it remembers it, else accounting."""
    shown = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True).stdout
    if "TRES=" in shown:
        return shown
    return subprocess.run(["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "AllocTRES"],
                          capture_output=True, text=True).stdout


def wait_until(predicate, what: str, timeout: float = 600):
    deadline = time.time() + timeout
    while not (found := predicate()):
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return found


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


def resumed_from(job_dir: Path) -> list[int | None]:
    """Each started event's resume step, read as the engine reads events (a line mid-write skipped)."""
    return [e.resumed_from for e in JobDir(job_dir).read_events().of(Started)]


@pytest.mark.slow
def test_a_time_limited_job_saves_and_resumes_and_another_host_is_refused(slurm_cluster, tmp_path):  # noqa: F811
    plan = {"slurm": {"time": "1", "save_before_end_s": 50, "gres": "none"},  # a CPU job; Slurm warns 50 s ahead
            "overrides": {"train": {"max_steps": 1000000, "save_every": 1000000, "eval_every": 1000000}}}
    front = lat_tui(tmp_path, plan, wait=False)
    state = tmp_path / "state"
    try:
        store = wait_until(lambda: (state / "journal.sqlite").exists() and open_store(state), "the run")
        run_id = wait_until(lambda: store.runs() and store.runs()[0].id, "the run")
        job = wait_until(lambda: (jobs := store.jobs(run_id)) and jobs[0], "the job")
        job_dir = Path(job.job_dir)
        # the first attempt saves at Slurm's warning; the engine resubmits it with --resume
        wait_until(lambda: any(resumed_from(job_dir)), "a resumed attempt")
        refused = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname login2 && exec "$@"', "sh",
                                  sys.executable, "-m", "lat_core.engine", "--state-dir", str(state)],
                                 env=ENV, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "of another host serves this state directory" in refused.stdout
        assert not (state / "engine.fault").exists()
        store.add_command(run_id, CancelRun())
        front.communicate(timeout=300)
    finally:
        if front.poll() is None:
            front.kill()
    job = store.job(job.id)
    first = store.attempts(job.id)[0]
    assert first.returncode == 75  # the trainer's "saved to be resumed"
    requeued = [t.detail for t in store.transitions(run_id, job_id=job.id) if t.new_state == JobState.QUEUED][1:]
    assert requeued[0].startswith("saved at step ") and "resubmitted to resume" in requeued[0], requeued
    saved_step = int(requeued[0].split()[3])
    assert resumed_from(job_dir)[:2] == [None, saved_step] and "--resume" in job.argv
    log = (job_dir / "train.log").read_text()
    assert "asked to save and stop (SIGUSR1)" in log and " stopped to resume at step " in log
