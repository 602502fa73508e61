"""Build the base model (tiny random or pretrained) and wrap it with a PEFT adapter.

Why one module: GLA (fla) and Mamba (transformers) differ in config classes,
CPU support and module names, and everything family-specific should live in
one place so the training loop stays generic.
"""
from __future__ import annotations

import os

import torch
import torch.nn as nn

from lat_core.config.job import TINY, TINY_DEFAULTS, JobConfig, TrainConfigError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _gla_classes():
    """Import fla lazily, only its GLA part (fla_gla), and choose its kernels (the CPU stand-ins where no GPU exists)."""
    from .fla_gla import gla_classes, use_gla_kernels_for

    GLAConfig, GLAForCausalLM = gla_classes()
    use_gla_kernels_for(torch.cuda.is_available())
    return GLAConfig, GLAForCausalLM


def _mamba_classes():
    """transformers' Mamba; without mamba_ssm kernels it takes the pure-PyTorch slow path."""
    from transformers import MambaConfig, MambaForCausalLM
    return MambaConfig, MambaForCausalLM


MAMBA_KERNELS = ("mamba_ssm", "causal_conv1d")


def _importable(module: str) -> bool:
    import importlib
    try:
        importlib.import_module(module)
    except Exception:  # ImportError, or a kernel built for another torch/CUDA failing at import
        return False
    return True


def mamba_fast_path_available(importable=_importable) -> bool:
    """Whether transformers' Mamba can use the fused CUDA kernels: its own ``is_fast_path_available``
    where the installed version has one (4.x), else both kernel packages importable (5.x falls back
    per function to them, then to PyTorch)."""
    from transformers.models.mamba import modeling_mamba
    flag = getattr(modeling_mamba, "is_fast_path_available", None)
    if flag is not None:
        return bool(flag)
    return all(importable(m) for m in MAMBA_KERNELS)


def mamba_fast_path_note(family: str, device_type: str, available: bool) -> str | None:
    """The log line for a Mamba job on CUDA without the fast kernels; None when it does not apply."""
    if family != "mamba" or device_type != "cuda" or available:
        return None
    return ("Mamba fast path unavailable: mamba_ssm / causal_conv1d are not importable, so transformers "
            "runs Mamba's slow pure-PyTorch path on CUDA; expect training steps several times slower "
            "and more activation memory (worse with longer sequences). Install the kernels in this "
            "environment: pip install mamba-ssm causal-conv1d")


def mamba_path(family: str, device_type: str) -> tuple[bool | None, str | None]:
    """A job's Mamba kernels, as its started event and log say them, alone or as a fused member:
    whether the fast kernels are usable (None: not a Mamba job) and the slow-path note (None: none
    due)."""
    fast = mamba_fast_path_available() if family == "mamba" else None
    return fast, mamba_fast_path_note(family, device_type, bool(fast))


def _tiny_model(cfg: JobConfig, tokenizer) -> nn.Module:
    """A randomly initialised small model sized from model.tiny, vocab from the tokenizer."""
    family = cfg.model.family
    sizes = {**TINY_DEFAULTS[family], **cfg.model.tiny}
    sizes.setdefault("vocab_size", len(tokenizer))
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
           "bos_token_id": tokenizer.eos_token_id}
    if family == "gla":
        config_cls, model_cls = _gla_classes()
        # the loop computes its own loss, so fla's fused (Triton) cross entropy is never needed
        config = config_cls(**sizes, **ids, fuse_cross_entropy=False, tie_word_embeddings=False,
                            fuse_swiglu=cfg.gla.use_fused_swiglu)
    else:
        config_cls, model_cls = _mamba_classes()
        config = config_cls(**sizes, **ids, tie_word_embeddings=False)
    # initialise where it will train: a 1.3B model takes ~30 s to initialise on the CPU, <1 s on a GPU
    with torch.device(_init_device()):
        model = model_cls(config)
    return model.to(DTYPES[cfg.model.dtype])


def _init_device() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"


def _pretrained_model(cfg: JobConfig) -> nn.Module:
    """Load a hub id or a local directory written by save_pretrained."""
    config_cls, model_cls = _gla_classes() if cfg.model.family == "gla" else _mamba_classes()
    kwargs = {"dtype": DTYPES[cfg.model.dtype]}
    if cfg.model.family == "gla":
        kwargs["fuse_swiglu"] = cfg.gla.use_fused_swiglu
        if not torch.cuda.is_available():
            kwargs["fuse_cross_entropy"] = False
    try:
        return model_cls.from_pretrained(cfg.model.name_or_path, **kwargs)
    except OSError as exc:
        raise TrainConfigError(f"model.name_or_path: cannot load {cfg.model.name_or_path!r}: {exc}") from exc


def load_tokenizer(cfg: JobConfig, built):
    """The checkpoint's own tokenizer when it ships one, else the locally built one."""
    if cfg.model.name_or_path == TINY:
        return built
    from pathlib import Path

    from transformers import AutoTokenizer
    local = Path(cfg.model.name_or_path).expanduser()
    if local.is_dir() and not any((local / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return built  # a bare save_pretrained dir: AutoTokenizer would invent an empty one
    try:
        tok = AutoTokenizer.from_pretrained(cfg.model.name_or_path)
    except Exception:  # noqa: BLE001 - a dir without tokenizer files raises various errors
        return built
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def build_base_model(cfg: JobConfig, tokenizer) -> nn.Module:
    """Base model for the job, checked against the tokenizer's vocabulary."""
    torch.manual_seed(cfg.seed)
    if cfg.model.name_or_path == TINY:
        model = _tiny_model(cfg, tokenizer)
    else:
        model = _pretrained_model(cfg)
    n_vocab = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > n_vocab:
        raise TrainConfigError(f"model.name_or_path: tokenizer has {len(tokenizer)} tokens but the "
                               f"model's embedding only {n_vocab}")
    return model


def linear_module_names(model: nn.Module) -> list[str]:
    """Distinct short names of the model's nn.Linear layers (what LoRA can target)."""
    return sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
                   if isinstance(mod, nn.Linear) and name})


def check_targets(model: nn.Module, targets: list[str]) -> None:
    """Fail with the list of valid names when a target module does not exist as a Linear."""
    full = [name for name, mod in model.named_modules() if isinstance(mod, nn.Linear)]
    for t in targets:
        if not any(n == t or n.endswith("." + t) for n in full):
            raise TrainConfigError(
                f"peft.target_modules: model has no linear module named {t!r} "
                f"(linear modules: {', '.join(linear_module_names(model))})")


def wrap_peft(model: nn.Module, cfg: JobConfig, environ: dict | None = None) -> nn.Module:
    """Attach a LoRA-family adapter (adapters.py); only the adapter's weights stay trainable."""
    from peft import get_peft_model

    from .adapters import check_refusals, lora_config
    check_targets(model, cfg.peft.target_modules)
    check_refusals(model, cfg)
    n_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    lora = lora_config(cfg, n_layers, dict(os.environ) if environ is None else environ)
    if cfg.train.gradient_checkpointing:
        # non-reentrant checkpointing: works with frozen inputs/adapters and keeps RNG state exact
        enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5 name
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    return get_peft_model(model, lora)


def count_params(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, total
