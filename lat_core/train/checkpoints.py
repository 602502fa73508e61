"""Checkpoints: listing, writing (adapter, optimizer, RNG state) and strict-resume loading."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from lat_core.config.job import TrainConfigError
from .events import read_events

CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


def checkpoints(out: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint dir, ascending."""
    found = []
    if out.is_dir():
        for p in out.iterdir():
            m = CKPT_RE.match(p.name)
            if m and (p / "trainer_state.json").is_file():
                found.append((int(m.group(1)), p))
    return sorted(found)


def prepare_output_dir(out: Path, resume: bool, overwrite: bool) -> None:
    """Apply --resume / --overwrite rules before any heavy import, so refusals are instant."""
    events = out / "events.jsonl"
    if resume and overwrite:
        raise TrainConfigError("--resume and --overwrite exclude each other")
    if overwrite:
        events.unlink(missing_ok=True)
        for p in list(out.glob("checkpoint-*")) + [out / "tokenizer", out / "predictions"]:
            if p.is_dir():
                shutil.rmtree(p)
        return
    if resume:
        if not checkpoints(out):
            raise TrainConfigError(f"--resume: no checkpoint-* directory in {out}")
        return
    if any(e.get("event") == "finished" for e in read_events(events)):
        raise TrainConfigError(f"{events} already holds a finished run; "
                               "pass --overwrite to start again or --resume to continue")


def _extra_params(model) -> dict:
    """Trainable parameters that are not part of the PEFT adapter (SDLoRA's SSM entries)."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad and "lora_" not in n}


def save_checkpoint(model, optimizer, out: Path, step: int, state: dict, save_optimizer: bool = True) -> Path:
    """Adapter (save_pretrained), extra trainables, optimizer + RNG state and trainer_state.json.

    trainer_state.json is written last, so a dir without it is an interrupted save.
    SAVE_OPTIMIZER_STATE=0 (save_optimizer False) leaves optimizer.pt out.
    """
    from safetensors.torch import save_file
    path = out / f"checkpoint-{step}"
    model.save_pretrained(str(path))
    extra = _extra_params(model)
    if extra:
        save_file({n: p.detach().contiguous().cpu() for n, p in extra.items()}, str(path / "extra_trainable.safetensors"))
    torch.save({"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
               path / "rng_state.pt")
    if save_optimizer:
        torch.save(optimizer.state_dict(), path / "optimizer.pt")
    else:
        (path / "optimizer.pt").unlink(missing_ok=True)
    (path / "trainer_state.json").write_text(json.dumps({**state, "step": step,
                                                         "optimizer_saved": save_optimizer}, indent=1))
    return path


def load_checkpoint(model, optimizer, path: Path) -> dict:
    """Restore adapter weights, extra trainables, optimizer and RNG state; returns the trainer state
    with `optimizer_restored` telling whether optimizer.pt was there."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = path / "adapter_model.safetensors"
    set_peft_model_state_dict(model, load_file(str(weights)))
    if (path / "extra_trainable.safetensors").is_file():
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n, t in load_file(str(path / "extra_trainable.safetensors")).items():
                params[n].copy_(t)
    restored = (path / "optimizer.pt").is_file()
    if restored:
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    if (path / "rng_state.pt").is_file():
        rng = torch.load(path / "rng_state.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
    return {**json.loads((path / "trainer_state.json").read_text()), "optimizer_restored": restored}
