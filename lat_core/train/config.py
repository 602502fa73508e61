"""Job config for one training run: parse and validate the YAML the engine writes.

Why a hand-rolled dataclass parser: the engine and the trainer meet only at
this file, so every mistake (typo'd key, wrong type, unknown dataset) must be
caught before any heavy import and reported as one line naming the field.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FAMILIES = ("gla", "mamba")
DTYPES = ("float32", "bfloat16", "float16")
PEFT_METHODS = ("lora",)


class TrainConfigError(ValueError):
    """A job config problem; the CLI prints it as `error: <message>` and exits 2."""


@dataclass
class ModelConfig:
    """Which model to fine-tune; `tiny` sizes apply only to name_or_path == tiny-random."""
    family: str = "gla"
    name_or_path: str = "tiny-random"
    tiny: dict = field(default_factory=dict)
    dtype: str = "float32"


@dataclass
class PeftConfig:
    """Adapter settings, passed through to peft.LoraConfig."""
    method: str = "lora"
    r: int = 8
    alpha: float = 16
    dropout: float = 0.0
    target_modules: list = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class TrainSection:
    """Optimisation and bookkeeping cadence."""
    batch_size: int = 8
    lr: float = 2e-3
    max_steps: int = 40
    eval_every: int = 20
    save_every: int = 20
    max_seq_len: int = 48
    gradient_checkpointing: bool = False
    num_workers: int = 0
    log_every: int = 5
    num_threads: int = 1
    weight_decay: float = 0.0
    warmup_steps: int = 0


@dataclass
class JobConfig:
    """The whole job file."""
    name: str
    model: ModelConfig
    peft: PeftConfig
    data: str
    seed: int
    train: TrainSection
    output_dir: Path
    cfg_path: Path | None = None


_TINY_KEYS = {"gla": {"hidden_size", "num_hidden_layers", "num_heads", "vocab_size", "expand_k",
                      "expand_v", "hidden_ratio", "attn_mode"},
              "mamba": {"hidden_size", "num_hidden_layers", "state_size", "vocab_size",
                        "expand", "conv_kernel"}}


def _check_type(where: str, value: Any, typ: type) -> Any:
    """Coerce ints to floats where a float is wanted; reject everything else that mismatches."""
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if typ is int and isinstance(value, bool):
        raise TrainConfigError(f"{where}: expected an integer, got {value!r}")
    if typ is list:
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise TrainConfigError(f"{where}: expected a non-empty list of strings, got {value!r}")
        return value
    if not isinstance(value, typ):
        raise TrainConfigError(f"{where}: expected {typ.__name__}, got {value!r}")
    return value


def _build(cls, section: str, raw: Any):
    """Fill dataclass `cls` from dict `raw`, naming `section.key` in every error."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise TrainConfigError(f"{section}: expected a mapping, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            raise TrainConfigError(f"unknown key '{section}.{key}' (allowed: {', '.join(fields)})")
    kwargs = {}
    hints = {"int": int, "float": float, "str": str, "bool": bool, "dict": dict, "list": list}
    for key, value in raw.items():
        typ = hints.get(str(fields[key].type).split(" ")[0], object)
        kwargs[key] = _check_type(f"{section}.{key}", value, typ) if typ is not object else value
    return cls(**kwargs)


def _validate(cfg: JobConfig) -> None:
    """Range and choice checks that types alone cannot express."""
    m, p, t = cfg.model, cfg.peft, cfg.train
    if m.family not in FAMILIES:
        raise TrainConfigError(f"model.family: must be one of {FAMILIES}, got {m.family!r}")
    if m.dtype not in DTYPES:
        raise TrainConfigError(f"model.dtype: must be one of {DTYPES}, got {m.dtype!r}")
    for key in m.tiny:
        if key not in _TINY_KEYS[m.family]:
            raise TrainConfigError(f"unknown key 'model.tiny.{key}' for family {m.family} "
                                   f"(allowed: {', '.join(sorted(_TINY_KEYS[m.family]))})")
    if p.method not in PEFT_METHODS:
        raise TrainConfigError(f"peft.method: must be one of {PEFT_METHODS}, got {p.method!r}")
    if p.r < 1:
        raise TrainConfigError(f"peft.r: must be >= 1, got {p.r}")
    if not 0.0 <= p.dropout < 1.0:
        raise TrainConfigError(f"peft.dropout: must be in [0, 1), got {p.dropout}")
    for key in ("batch_size", "max_steps", "eval_every", "save_every", "max_seq_len",
                "log_every", "num_threads"):
        if getattr(t, key) < 1:
            raise TrainConfigError(f"train.{key}: must be >= 1, got {getattr(t, key)}")
    if t.lr <= 0:
        raise TrainConfigError(f"train.lr: must be > 0, got {t.lr}")
    if t.num_workers < 0:
        raise TrainConfigError(f"train.num_workers: must be >= 0, got {t.num_workers}")


TOP_KEYS = ("name", "model", "peft", "data", "seed", "train", "output_dir")


def parse_config(raw: Any, cfg_path: Path | None = None) -> JobConfig:
    """Turn the loaded YAML mapping into a validated JobConfig."""
    if not isinstance(raw, dict):
        raise TrainConfigError("config: the file must hold a YAML mapping")
    for key in raw:
        if key not in TOP_KEYS:
            raise TrainConfigError(f"unknown key '{key}' (allowed: {', '.join(TOP_KEYS)})")
    if "data" not in raw or raw["data"] in (None, ""):
        raise TrainConfigError("data: missing dataset name (e.g. tiny-sst2 or a directory path)")
    data = _check_type("data", raw["data"], str)
    seed = _check_type("seed", raw.get("seed", 1), int)
    default_name = cfg_path.stem if cfg_path else "job"
    name = _check_type("name", raw.get("name", default_name), str)
    if raw.get("output_dir"):
        out = Path(_check_type("output_dir", raw["output_dir"], str)).expanduser()
    elif cfg_path is not None:
        out = cfg_path.resolve().parent
    else:
        raise TrainConfigError("output_dir: missing and there is no config file to default to")
    cfg = JobConfig(
        name=name,
        model=_build(ModelConfig, "model", raw.get("model")),
        peft=_build(PeftConfig, "peft", raw.get("peft")),
        data=data, seed=seed,
        train=_build(TrainSection, "train", raw.get("train")),
        output_dir=out.resolve(), cfg_path=cfg_path,
    )
    _validate(cfg)
    return cfg


def load_config(path: str | Path) -> JobConfig:
    """Read and validate a job YAML file."""
    path = Path(path)
    if not path.is_file():
        raise TrainConfigError(f"--cfg: no such file {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TrainConfigError(f"--cfg: {path} is not valid YAML: {exc}") from exc
    return parse_config(raw, path)
