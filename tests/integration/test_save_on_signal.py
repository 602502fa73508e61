"""The trainer's answer to Slurm's warning before a time limit (SIGUSR1): a checkpoint at the next
step, exit 75, and a ``--resume`` that continues from it; the engine resubmits such a job itself."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME
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
