"""The trainer trains what an engine-written job.yaml says, whatever its environment holds; a job file
started by hand (no ``resolved: true``) still takes the seeds' variables from the environment.

Why it matters: a remedy (smaller micro-batch: batch 4 x accumulation 2) is written into job.yaml
while the job's environment still says HP_BATCH_SIZE=8; applying the environment again would undo it.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"


def write_job(job_dir: Path, **top) -> Path:
    cfg = yaml.safe_load(GLA.read_text())
    cfg["train"].update(batch_size=4, grad_accum=2, max_steps=1, eval_every=1, save_every=1, log_every=1)
    cfg.update(data="tiny-sst2", seed=1, output_dir=str(job_dir), **top)
    job_dir.mkdir(parents=True)
    (job_dir / "job.yaml").write_text(yaml.safe_dump(cfg))
    return job_dir / "job.yaml"


def started(cfg: Path, env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-m", "lat_core.train", "--cfg", str(cfg)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in (cfg.parent / "events.jsonl").read_text().splitlines()]
    return next(e for e in events if e["event"] == "started")


def test_engine_written_job_ignores_a_conflicting_env_and_a_hand_started_one_honours_it(tmp_path):
    env = {"HP_BATCH_SIZE": "8", "GRADIENT_CHECKPOINTING": "1"}
    engine = started(write_job(tmp_path / "engine", resolved=True), env)
    assert (engine["batch_size"], engine["grad_accum"], engine["gradient_checkpointing"]) == (4, 2, False)
    by_hand = started(write_job(tmp_path / "by_hand"), env)
    assert (by_hand["batch_size"], by_hand["grad_accum"], by_hand["gradient_checkpointing"]) == (8, 2, True)
