"""best/ and final/ as adapters that load the same anywhere: ``PeftModel.from_pretrained(base, folder)``
on the unmodified base reproduces the recorded metrics.

Why a conversion: LoRA-GA, PiSSA and OLoRA move the base weights when they initialise
(W_res = W - s*B0@A0), so their trained (A, B) reproduce the model only on W_res, which a plain load
does not have (a LoRA-GA best/ scored 0.44 instead of 0.92); PEFT recomputes PiSSA's SVD on load,
which a randomised ``pissa_niter_N`` does not repeat. The trained model is W + s*(B@A - B0@A0)
= W + s*[B, -B0] @ [A; A0]: a plain LoRA of rank 2r whose alpha keeps the scale s (2*alpha, or
sqrt(2)*alpha under rsLoRA). That is PEFT's own conversion (``save_pretrained(...,
path_initial_model_for_weight_conversion=...)``, LoraModel.subtract_mutated_init), done here on the
saved files, so the checkpoint that turns out best, possibly steps later, converts the same way.
The initial adapter (A0, B0) is kept in the job folder as adapter_init/ when the job starts.

checkpoint-N/ stays as trained (rank r, the method's own config): --resume rebuilds W_res and loads it.

SDLoRA's trained SSM entries (A_log, D, dt_proj.bias) are no LoRA weights: they stay in
extra_trainable.safetensors beside the adapter, under the names of the loaded PeftModel's
parameters, and one line after from_pretrained loads them (README, "Loading adapters elsewhere"):
``model.load_state_dict(safetensors.torch.load_file(f"{folder}/extra_trainable.safetensors"), strict=False)``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from lat_core.config.job import JobConfig, TrainConfigError
from lat_core.contract.jobdir.names import ADAPTER_CONFIG as CONFIG
from lat_core.contract.jobdir.names import ADAPTER_WEIGHTS as WEIGHTS
from lat_core.contract.jobdir.names import INITIAL_ADAPTER  # in the job folder: the adapter as initialised


def moves_base_weights(cfg: JobConfig) -> bool:
    """Whether the job's initialisation rewrites the base weights it adapts."""
    init = str(cfg.peft.init_lora_weights).lower()
    return init in ("loraga", "olora") or init.startswith("pissa")


def save_initial_adapter(model, job_dir: Path) -> Path | None:
    """adapter_init/ (written once: a resumed run keeps the first run's) where best/ and final/
    need it; None where the method leaves the base as it is."""
    dest = job_dir / INITIAL_ADAPTER
    if (dest / WEIGHTS).is_file():
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def make_portable(folder: Path, job_dir: Path) -> None:
    """Rewrite the adapter in ``folder`` as a plain LoRA on the unmodified base, where the job
    kept an initial adapter (its method moved the base weights); otherwise it already is one."""
    initial = job_dir / INITIAL_ADAPTER
    if not (initial / WEIGHTS).is_file():
        return
    from safetensors.torch import load_file, save_file
    weights = plain_lora_weights(load_file(str(folder / WEIGHTS)), load_file(str(initial / WEIGHTS)))
    config = plain_lora_config(json.loads((folder / CONFIG).read_text()))
    save_file(weights, str(folder / WEIGHTS))
    (folder / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def plain_lora_weights(trained: dict[str, torch.Tensor], initial: dict[str, torch.Tensor]) -> dict:
    """[A; A0] and [B, -B0] per adapted module: B'@A' = B@A - B0@A0."""
    out = {}
    for key, tensor in trained.items():
        if ".lora_A." in key:
            out[key] = torch.cat([tensor, initial[key]], dim=0).contiguous()
        elif ".lora_B." in key:
            out[key] = torch.cat([tensor, -initial[key]], dim=1).contiguous()
        else:   # DoRA's magnitudes depend on the base weight: no plain LoRA holds them
            raise TrainConfigError(f"adapter: {key} cannot be converted to a plain LoRA "
                                   "(a method that moves the base weights combined with DoRA)")
    return out


def plain_lora_config(config: dict) -> dict:
    """The config of the rank-2r adapter with the same scale, as PEFT writes it for its conversion."""
    alpha_factor = 2 ** 0.5 if config.get("use_rslora") else 2
    return {**config, "init_lora_weights": True, "r": 2 * config["r"],
            "lora_alpha": config["lora_alpha"] * alpha_factor,
            "rank_pattern": {k: 2 * v for k, v in (config.get("rank_pattern") or {}).items()},
            "alpha_pattern": {k: v * alpha_factor for k, v in (config.get("alpha_pattern") or {}).items()}}
