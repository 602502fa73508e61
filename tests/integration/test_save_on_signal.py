"""The trainer's answer to Slurm's warning before a time limit (SIGUSR1): a checkpoint at the next
step, exit 75, and a ``--resume`` that continues from it; the engine resubmits such a job itself."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME
from lat_core.train.torchrun import saved_to_resume
from tests.helpers.waits import HANG_S
from tests.integration.test_trainer import ROOT, events, job


def wait_for_step(job_dir, proc, timeout=300):
    """Until the trainer logged a step: the signal then comes mid-training, at any speed."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        path = job_dir / "events.jsonl"
        if path.exists() and any(json.loads(line)["event"] == "step" for line in path.read_text().splitlines()):
            return
        time.sleep(0.1)
    raise AssertionError(f"no step event (exit {proc.poll()})")


@pytest.mark.slow
def test_usr1_saves_at_the_next_step_exits_75_and_resumes(tmp_path):
    cfg = job(tmp_path / "j", "mamba", train={"max_steps": 100000, "save_every": 100000, "eval_every": 100000})
    job_dir = cfg.parent
    proc = subprocess.Popen([sys.executable, "-m", "lat_core.train", "--cfg", str(cfg)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    wait_for_step(job_dir, proc)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_SAVED_TO_RESUME, out[-3000:]
    kinds = [e["event"] for e in events(job_dir)]
    assert "finished" not in kinds and "failed" not in kinds
    saved = [e["step"] for e in events(job_dir) if e["event"] == "checkpoint"]
    assert len(saved) == 1 and (job_dir / f"checkpoint-{saved[0]}" / "trainer_state.json").is_file()
    assert "asked to save and stop (SIGUSR1)" in out
    resumed = subprocess.Popen([sys.executable, "-m", "lat_core.train", "--cfg", str(cfg), "--resume"], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 300
        while not [e for e in events(job_dir) if e["event"] == "started" and e.get("resumed_from")]:
            assert time.time() < deadline and resumed.poll() is None, resumed.stdout.read()[-3000:]
            time.sleep(0.1)
        assert [e.get("resumed_from") for e in events(job_dir) if e["event"] == "started"] == [None, saved[0]]
    finally:
        resumed.kill()
        resumed.wait()


@pytest.fixture
def torchrun_job(tmp_path):
    """A tiny GLA job under LAT's torchrun, two CPU ranks (gloo), training until asked to stop:
    (its folder, its torchrun), once it took a step; whatever is left of it is killed at the end."""
    cfg = job(tmp_path / "j", "gla", train={"max_steps": 100000, "save_every": 100000, "eval_every": 100000})
    proc = subprocess.Popen([sys.executable, "-m", "lat_core.train.torchrun", "--standalone", "--nnodes=1",
                             "--nproc_per_node=2", "-m", "lat_core.train", "--cfg", str(cfg)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "",
                                 "NUM_DATA_WORKERS": "0"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    agent = psutil.Process(proc.pid)
    try:
        wait_for_step(cfg.parent, proc, timeout=HANG_S)
        yield cfg.parent, proc
    finally:
        if proc.poll() is None:  # a test that failed: no process of it outlives the test
            for process in [*agent.children(recursive=True), agent]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            proc.wait()


def saved_once(job_dir, proc) -> str:
    """torchrun's output, once every rank saved the one checkpoint and it exited 75."""
    out, _ = proc.communicate(timeout=HANG_S)
    assert proc.returncode == EXIT_SAVED_TO_RESUME, out[-3000:]
    kinds = [e["event"] for e in events(job_dir)]
    assert "finished" not in kinds and "failed" not in kinds
    [saved] = [e["step"] for e in events(job_dir) if e["event"] == "checkpoint"]
    assert (job_dir / f"checkpoint-{saved}" / "trainer_state.json").is_file()
    assert out.count(f"saved a checkpoint at step {saved} when asked (SIGUSR1)") == 2  # both ranks, one step
    assert "the workers saved to be resumed; exit 75" in out
    return out


@pytest.mark.slow
def test_usr1_to_torchrun_reaches_every_worker_and_exits_75(torchrun_job):
    """torchrun's agent alone would die of USR1 (its default action) and leave the workers training."""
    job_dir, proc = torchrun_job
    proc.send_signal(signal.SIGUSR1)
    assert saved_once(job_dir, proc).count("SIGUSR1 passed on to worker ") == 2


@pytest.mark.slow
def test_usr1_that_reaches_one_rank_stops_every_rank_at_the_same_step(torchrun_job):
    """The signal reaches the ranks at different moments: they vote, and stop at one step (a rank
    that went on alone would wait forever in the next gradient all-reduce)."""
    job_dir, proc = torchrun_job
    one, _ = psutil.Process(proc.pid).children()  # either rank (their titles hide which is which)
    one.send_signal(signal.SIGUSR1)
    assert "asked to save and stop (SIGUSR1)" in saved_once(job_dir, proc)


def test_one_worker_that_saved_to_resume_speaks_for_the_job():
    """torchrun lists the workers it stopped after the first exit (SIGTERM) among the failures."""
    assert saved_to_resume({0: EXIT_SAVED_TO_RESUME, 1: -signal.SIGTERM})
    assert not saved_to_resume({0: 1, 1: -signal.SIGTERM}) and not saved_to_resume({})
