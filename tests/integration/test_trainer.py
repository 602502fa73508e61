"""End-to-end trainer runs as real subprocesses on tiny GLA / Mamba models (CPU)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
ORDER = ["started", "step", "eval", "checkpoint", "memory", "finished"]


def job(tmp: Path, family: str, **over) -> Path:
    """Write a job YAML in tmp (a fresh job dir) and return its path."""
    src = {"gla": "configs/experiments/gla/tiny_lora_qkvo.yaml",
           "mamba": "configs/experiments/mamba/tiny_lora.yaml"}[family]
    cfg = yaml.safe_load((ROOT / src).read_text())
    # every checkpoint kept: the resume test resumes from checkpoint-10
    cfg["train"].update(max_steps=20, eval_every=10, save_every=10, log_every=1, save_total_limit=None)
    for section, values in over.items():
        if isinstance(values, dict) and isinstance(cfg.get(section), dict):
            cfg[section].update(values)
        else:
            cfg[section] = values
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def train(cfg: Path, *flags: str, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "lat_core.train", "--cfg", str(cfg), *flags],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def events(job_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]


def check_run(job_dir: Path, proc, steps: int = 20) -> list[dict]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    evs = events(job_dir)
    kinds = [e["event"] for e in evs]
    firsts = [kinds.index(k) for k in ORDER]
    assert firsts == sorted(firsts), kinds
    assert kinds[-2:] == ["memory", "finished"]
    assert all(isinstance(e["t"], float) for e in evs)
    started, fin = evs[0], evs[-1]
    assert started["device"] == "cpu" and 0 < started["trainable_params"] < started["total_params"]
    assert fin["status"] == "ok" and fin["steps"] == steps and 0 <= fin["best"]["accuracy"] <= 1
    losses = [e["loss"] for e in evs if e["event"] == "step"]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
    ev = next(e for e in evs if e["event"] == "eval")
    assert set(ev["metrics"]) >= {"accuracy", "loss"} and ev["split"] == "validation"
    ckpt = job_dir / "checkpoint-10"
    assert (ckpt / "adapter_model.safetensors").is_file() and (ckpt / "adapter_config.json").is_file()
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == 10
    assert (job_dir / "final" / "adapter_model.safetensors").is_file() and (job_dir / "best").is_dir()
    assert "step 5/20 loss" in proc.stdout
    return evs


@pytest.fixture(scope="module")
def gla_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("gla")
    cfg = job(d, "gla")
    return d, cfg, train(cfg)


@pytest.mark.slow
def test_gla_tiny_job(gla_run):
    d, _, proc = gla_run
    check_run(d, proc)


@pytest.mark.slow
def test_gla_resume_continues_after_checkpoint(gla_run):
    d, cfg, proc = gla_run
    assert proc.returncode == 0
    refused = train(cfg)
    assert refused.returncode == 2 and "already holds a finished run" in refused.stderr
    job(d, "gla", train={"max_steps": 30})
    (d / "checkpoint-20").rename(d / "checkpoint-x")  # resume from the 10-step checkpoint
    n_before = len(events(d))
    again = train(cfg, "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    new = events(d)[n_before:]
    assert new[0]["event"] == "started" and new[0]["resumed_from"] == 10
    steps = [e["step"] for e in new if e["event"] == "step"]
    assert steps[0] == 11 and steps[-1] == 30 and min(steps) > 10
    assert new[-1]["event"] == "finished" and new[-1]["steps"] == 30
    assert "resumed from checkpoint-10" in again.stdout


@pytest.mark.slow
def test_mamba_tiny_job(tmp_path):
    cfg = job(tmp_path, "mamba")
    check_run(tmp_path, train(cfg))


class _WritesMarker:
    """Unpickled, it would create ``path``: a crafted checkpoint file that runs code."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return exec, (f"open({str(self.path)!r}, 'w').write('ran')",)


@pytest.mark.slow
def test_resume_refuses_a_checkpoint_file_that_would_run_code(tmp_path):
    import torch

    cfg = job(tmp_path, "gla", train={"max_steps": 2, "eval_every": 2, "save_every": 2})
    assert train(cfg).returncode == 0
    marker = tmp_path / "ran-code"
    torch.save({"torch": torch.get_rng_state(), "cuda": _WritesMarker(marker)}, tmp_path / "checkpoint-2" / "rng_state.pt")
    job(tmp_path, "gla", train={"max_steps": 4, "eval_every": 2, "save_every": 2})
    proc = train(cfg, "--resume")
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {tmp_path / 'checkpoint-2' / 'rng_state.pt'}: refused to load"), last
    assert "GLOBAL" in last and "exec" in last
    assert not marker.exists()


def test_resume_without_checkpoint_exits_2(tmp_path):
    proc = train(job(tmp_path, "mamba"), "--resume")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --resume: no checkpoint")


@pytest.mark.parametrize("over, needle", [
    ({"train": {"lrr": 0.1}}, "train.lrr"),
    ({"bogus": 1}, "'bogus'"),
    ({"train": {"max_steps": "ten"}}, "train.max_steps"),
    ({"data": "no-such-dataset"}, "data: unknown dataset"),
    ({"model": {"family": "rwkv"}}, "model.family"),
])
def test_bad_config_exits_2(tmp_path, over, needle):
    proc = train(job(tmp_path, "mamba", **over))
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and needle in last, last


def test_missing_data_exits_2(tmp_path):
    cfg = job(tmp_path, "mamba")
    raw = yaml.safe_load(cfg.read_text())
    del raw["data"]
    cfg.write_text(yaml.safe_dump(raw))
    proc = train(cfg)
    assert proc.returncode == 2 and "error: data: missing" in proc.stderr


@pytest.mark.slow
def test_bad_target_module_names_module_and_lists_linears(tmp_path):
    proc = train(job(tmp_path, "mamba", peft={"target_modules": ["in_proj", "q_proj"]}))
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "'q_proj'" in last and "x_proj" in last and "out_proj" in last
    assert events(tmp_path)[-1]["event"] == "failed"


def _save_tiny_base(family: str, out: Path) -> Path:
    """Build the same tiny random base model the trainer would, and save_pretrained it."""
    sys.path.insert(0, str(ROOT))
    from lat_core.train import data as D
    from lat_core.config.job import load_config
    from lat_core.train.models import build_base_model
    cfg = load_config(job(out / "src", family))
    model = build_base_model(cfg, D.build_tokenizer(D.load_dataset(cfg.data)))
    model.save_pretrained(str(out / "base"))
    return out / "base"


@pytest.mark.slow
@pytest.mark.parametrize("family", ["mamba", "gla"])
def test_local_pretrained_directory(tmp_path, family):
    base = _save_tiny_base(family, tmp_path)
    d = tmp_path / "job"
    cfg = job(d, family, model={"name_or_path": str(base)})
    proc = train(cfg)
    evs = check_run(d, proc)
    assert evs[0]["name_or_path"] == str(base)


@pytest.mark.slow
def test_gla_job_runs_under_torchrun_with_gloo(tmp_path):
    """Two CPU ranks (DDP over gloo): rank 0 alone writes the events and checkpoints."""
    cfg = job(tmp_path, "gla", train={"max_steps": 6, "eval_every": 6, "save_every": 6, "log_every": 2})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "lat_core.train", "--cfg", str(cfg)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evs = events(tmp_path)
    kinds = [e["event"] for e in evs]
    assert kinds.count("started") == 1 and kinds.count("finished") == 1 and kinds[-1] == "finished"
    assert [e["step"] for e in evs if e["event"] == "step"] == [1, 2, 4, 6]  # the first step, then every 2
    assert all(e["tokens"] > 0 for e in evs if e["event"] == "step")  # both ranks' tokens, all-reduced
    assert evs[-1]["steps"] == 6 and (tmp_path / "checkpoint-6" / "adapter_model.safetensors").is_file()
