"""Presets and arithmetic of from-scratch GLA pretraining (no torch here, so it is cheap to test).

Gradient accumulation follows from ``total_batch_size / (device_batch_size x seq_len x world)``;
a total that does not divide is an error that shows the arithmetic, because a silently rounded
batch changes the experiment.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

from lat_core.config import values as V
from lat_core.config.env import EnvValueError, pretrain_env
from lat_core.config.gpu_need import cpu_problem
from lat_core.config.memory_prior import gla_shape
from lat_core.config.paths import shipped_configs

PRESET_DIR = shipped_configs() / "pretrain"
NO_WANDB_RUN = "dummy"
VOCAB = 256  # tokens are the corpus's UTF-8 bytes


class PretrainConfigError(ValueError):
    """A preset, override or batch arithmetic that cannot work; the message says why."""


@dataclass
class PretrainConfig:
    depth: int
    device_batch_size: int
    total_batch_size: int
    seq_len: int
    model_dim_per_layer: int = 64
    head_dim: int = 128
    lr: float = 6e-4
    weight_decay: float = 0.0
    warmup_iterations: int = 20
    num_iterations: int = 2000
    eval_every: int = 250
    eval_tokens: int = 262144
    save_every: int = 1000
    dtype: str = "bfloat16"
    seed: int = 1
    corpus: str = ""  # a local text file; empty = the tiny corpus the project ships
    compile: bool = False  # torch.compile the model (TORCH_COMPILE=1 of the dual-GPU scripts)
    wandb_run: str = "dummy"  # the W&B run's name; "dummy" (the scripts' default) logs to no tracker

    @property
    def uses_wandb(self) -> bool:
        return self.wandb_run != NO_WANDB_RUN

    @property
    def hidden_size(self) -> int:
        return self.depth * self.model_dim_per_layer

    @property
    def num_heads(self) -> int:
        return max(1, self.hidden_size // self.head_dim)

    def param_count(self) -> int:
        """The model's parameters (fla's GLA at these sizes), from the config alone."""
        return gla_shape({"hidden_size": self.hidden_size, "num_hidden_layers": self.depth,
                          "num_heads": self.num_heads, "vocab_size": VOCAB}).param_count()

    def grad_accum(self, world: int) -> int:
        per_step = self.device_batch_size * self.seq_len * world
        if self.total_batch_size % per_step:
            raise PretrainConfigError(
                f"total_batch_size {self.total_batch_size} is not a multiple of device_batch_size "
                f"{self.device_batch_size} x seq_len {self.seq_len} x world {world} = {per_step} "
                f"({self.total_batch_size} / {per_step} = {self.total_batch_size / per_step:.3f})")
        return self.total_batch_size // per_step

    def to_dict(self) -> dict:
        return asdict(self)


def load_preset(name_or_path: str) -> dict:
    """A shipped preset by name, or a YAML file. The dual-GPU scripts' Python configs
    (``configs/dual_gpu/balanced.py``) name the shipped preset of the same stem, which holds their numbers."""
    path = Path(name_or_path)
    if path.suffix == ".py":
        if not (PRESET_DIR / f"{path.stem}.yaml").is_file():
            raise PretrainConfigError(
                f"{name_or_path}: the dual-GPU scripts' Python configs are LAT presets now: use "
                f"--preset conservative|balanced|aggressive or a YAML file of preset fields")
        path = Path(path.stem)
    if not path.suffix:
        path = PRESET_DIR / f"{path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
        raise PretrainConfigError(f"unknown preset {name_or_path!r} (known: {known}, or a YAML path)")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise PretrainConfigError(f"{path}: expected a mapping of preset fields")
    return data


def parse_overrides(items: list[str]) -> dict:
    """``--device_batch_size=16`` style overrides (also ``--key value``), typed like the fields."""
    types = {f.name: f.type for f in fields(PretrainConfig)}
    out, i = {}, 0
    while i < len(items):
        key, sep, value = items[i].removeprefix("--").partition("=")
        if not sep:
            if i + 1 >= len(items):
                raise PretrainConfigError(f"--{key}: missing value")
            value, i = items[i + 1], i + 1
        if key not in types:
            raise PretrainConfigError(f"unknown option --{key} (options: {', '.join(sorted(types))})")
        out[key] = _typed(key, value, types[key])
        i += 1
    return out


def _typed(key: str, value: str, typ):
    name = typ if isinstance(typ, str) else typ.__name__
    if name == "bool":
        try:
            return V.BOOLEAN.parse_text(value)
        except ValueError as exc:
            raise PretrainConfigError(f"--{key}={value!r}: {exc}") from None
    kind = {"int": int, "float": float, "str": str}.get(name, str)
    try:
        return kind(value)
    except ValueError:
        raise PretrainConfigError(f"--{key}={value!r}: expected {kind.__name__}") from None


def env_fields(environ) -> dict:
    """The dual-GPU scripts' variables (TORCH_COMPILE, WANDB_RUN; lat_core.config.env) as fields."""
    try:
        return pretrain_env(environ)
    except EnvValueError as exc:
        raise PretrainConfigError(f"{exc} (from the environment)") from None


def build_config(preset: str, overrides: list[str], environ=None) -> PretrainConfig:
    """Preset < the environment's TORCH_COMPILE / WANDB_RUN < command-line overrides."""
    environ = os.environ if environ is None else environ
    data = {**load_preset(preset), **env_fields(environ), **parse_overrides(overrides)}
    known = {f.name for f in fields(PretrainConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise PretrainConfigError(f"unknown preset field {unknown[0]!r}")
    cfg = PretrainConfig(**data)
    for name in ("depth", "device_batch_size", "total_batch_size", "seq_len", "num_iterations"):
        if getattr(cfg, name) <= 0:
            raise PretrainConfigError(f"{name} must be positive, got {getattr(cfg, name)}")
    try:
        V.RUN_NAME.check(cfg.wandb_run)
    except ValueError as exc:
        raise PretrainConfigError(f"wandb_run {cfg.wandb_run!r}: {exc}") from None
    return cfg


def preflight(cfg: PretrainConfig, gpu_visible: bool, allow_cpu: bool) -> list[str]:
    """What cannot work, before torch is imported (the fine-tuning runs' preflight is
    lat_core.front.preflight; the size rule is the same one, lat_core.config.gpu_need): a model too
    big for the CPU where no GPU is visible, a corpus that is not there."""
    problems = []
    if not gpu_visible and not allow_cpu:
        found = cpu_problem(f"GLA depth {cfg.depth} (hidden {cfg.hidden_size})", cfg.param_count(), cfg.dtype,
                            why="no GPU is visible", way_out="run it where one is (CUDA_VISIBLE_DEVICES), "
                            "or --allow-cpu to train on the CPU anyway")
        if found:
            problems.append(found)
    if cfg.corpus and not Path(cfg.corpus).expanduser().is_file():
        problems.append(f"corpus {cfg.corpus}: no such file")
    return problems
