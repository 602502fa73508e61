"""Shared pieces of the fused-training tests: tiny fp32 GLA job configs, encoded rows, and separate
PEFT models built the way a job alone builds its adapter."""
from __future__ import annotations

import copy
from pathlib import Path

import torch
import yaml

from lat_core.config.job import parse_config
from lat_core.train import data as D

ROOT = Path(__file__).resolve().parents[2]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"


def job_cfg(out: Path, name: str, peft: dict | None = None, train: dict | None = None, seed: int = 1):
    """The tiny GLA job (fp32, CPU) with some peft/train fields changed."""
    raw = yaml.safe_load(GLA.read_text())
    raw["name"] = name
    raw["peft"].update(peft or {})
    raw["train"].update({"max_steps": 6, "eval_every": 100, "save_every": 100, "log_every": 1, **(train or {})})
    raw["seed"] = seed
    raw["output_dir"] = str(out / name)
    return parse_config(raw, environ={})


def tokenizer_and_rows():
    """(tokenizer, label ids, encoded tiny-sst2 training examples)."""
    ds = D.load_dataset("tiny-sst2")
    tok = D.build_tokenizer(ds)
    tok.padding_side = "left"
    ids = D.label_token_ids(tok, ds.label_words)
    return tok, ids, D.encode(ds.train, tok, ids, 48)


def base_model(cfg, tok):
    from lat_core.train.models import build_base_model
    return build_base_model(cfg, tok)


def peft_model(base, cfg, seed: int):
    """A separate PEFT model on a copy of ``base`` whose init draws from ``manual_seed(seed)``."""
    from lat_core.train.models import wrap_peft
    torch.manual_seed(seed)
    return wrap_peft(copy.deepcopy(base), cfg, environ={})


def randomise_b(model, seed: int) -> None:
    """Default LoRA starts with B = 0 (A gets no gradient then); give B values so both get one."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def saved_tiny_base(path: Path) -> Path:
    """A tiny random GLA written with save_pretrained: a base whose weights do not depend on the
    job's seed (a tiny-random base does), so members with different seeds share it."""
    if not (path / "config.json").is_file():
        tok, _, _ = tokenizer_and_rows()
        base_model(job_cfg(path.parent, "base"), tok).save_pretrained(str(path))
    return path


def run_alone(cfg) -> dict[int, float]:
    """The job trained by the single-job trainer (loop.run, the HF Trainer); its step losses."""
    from lat_core.contract.jobdir import JobDir, Step
    from lat_core.train.loop import run
    with JobDir(cfg.output_dir).event_writer() as ev:
        run(cfg, ev, resume=False, argv=["--cfg", "x.yaml"])
    return {e.step: e.loss for e in events_of(cfg.output_dir, Step)}


def job_dir(root: Path, name: str, base: Path, peft: dict | None = None, train: dict | None = None,
            seed: int = 1) -> Path:
    """A prepared job folder (job.yaml, as the engine writes one) on the saved tiny base."""
    raw = yaml.safe_load(GLA.read_text())
    raw["name"] = name
    raw["model"]["name_or_path"] = str(base)
    raw["peft"].update(peft or {})
    raw["train"].update({"max_steps": 6, "eval_every": 3, "save_every": 3, "log_every": 1, **(train or {})})
    raw["seed"] = seed
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    raw["output_dir"] = str(folder)
    (folder / "job.yaml").write_text(yaml.safe_dump(raw))
    return folder


def events_of(folder: Path, kind: type | None = None) -> list:
    """The job's events (of one kind: Step, Started, ...), as the contract's reader reads them."""
    from lat_core.contract.jobdir import JobDir
    return [e for e in JobDir(folder).read_events().events if kind is None or isinstance(e, kind)]
