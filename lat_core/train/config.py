"""Job config for one training run: parse and validate the YAML the engine writes.

Why a hand-rolled dataclass parser: the engine and the trainer meet only at
this file, so every mistake (typo'd key, wrong type, unknown dataset) must be
caught before any heavy import and reported as one line naming the field.
"""
from __future__ import annotations

from lat_core.config.env import ENV_FIELDS, TRACKERS as ENV_TRACKERS, parse_env_value
from lat_core.config.paths import config_trees, shipped_configs

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FAMILIES = ("gla", "mamba")
DTYPES = ("float32", "bfloat16", "float16")
SCHEDULERS = ("constant", "linear", "cosine", "constant_with_warmup")
TRACKERS = ENV_TRACKERS
PEFT_METHODS = ("lora", "dora", "rslora", "pissa", "loraga", "sdlora")
# Named target sets usable in peft.target_modules (expanded before PEFT sees them).
TARGET_SETS = {
    "QKVO": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "G": ["g_proj"],
    "GK": ["gk_proj.0", "gk_proj.1"],
    "MLP": ["gate_proj", "up_proj", "down_proj"],
    "HEAD": ["lm_head"],
    "MAMBA_PROJ": ["in_proj", "x_proj"],
}
PEFT_SPEC_DIR = shipped_configs() / "peft"


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
    """Adapter settings, passed through to peft.LoraConfig (see lat_core/train/adapters.py).

    method is a shorthand: dora = lora + use_dora, rslora = lora + use_rslora,
    pissa = lora + init_lora_weights pissa, loraga = gradient-estimated init,
    sdlora = LoRA on projections + selected Mamba SSM channels.
    """
    method: str = "lora"
    spec: str = ""
    r: int = 8
    alpha: float = 16
    dropout: float = 0.0
    target_modules: list = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    layers: object = None
    use_dora: bool = False
    use_rslora: bool = False
    init_lora_weights: object = True
    loraga_batches: int = 4
    sdlora_warmup_steps: int = 10
    sdlora_channel_fraction: float = 0.1
    sdlora_state_fraction: float = 0.5
    sdlora_params: list = field(default_factory=lambda: ["A_log", "D", "dt_proj.bias"])


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
    grad_accum: int = 1
    # epochs: when set (and no explicit max_steps at the same or a later layer), max_steps =
    # ceil(epochs x train examples / effective batch); see README "Trainer".
    epochs: float | None = None
    lr_scheduler: str | None = None      # constant | linear | cosine | constant_with_warmup
    warmup_ratio: float = 0.0            # used when warmup_steps is 0
    # dataloader; None = not set (a default or the large-dataset choice applies)
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    large_dataset_threshold: int = 200_000
    logits_to_keep: object = "auto"      # auto | 0 (all logits) | N (last N positions)
    eval_accumulation_steps: int = 0     # move eval results to the host every N batches (0: each)
    save_optimizer_state: bool = True
    save_total_limit: int | None = 1     # newest checkpoints kept besides the best one; null keeps all
    report_to: object = "none"           # none | tensorboard | wandb | swanlab, or a list


@dataclass
class EvalSection:
    """Evaluation: generation settings (new-token counts unless use_max_new_tokens is off)."""
    gen_max_length: int = 32
    gen_min_length: int = 0
    num_beams: int = 1
    use_max_new_tokens: bool = True
    batch_size: int = 0          # 0: train.batch_size
    max_target_len: int = 48     # target tokens kept for generation training


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
    eval: EvalSection = field(default_factory=EvalSection)
    data_dir: str = ""
    gla: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    # dotted keys the user set (YAML or env), e.g. "train.num_workers"; defaults are not listed
    explicit: set = field(default_factory=set)


TINY = "tiny-random"
# Sizes of a tiny-random model that model.tiny does not set. Here, not in models.py, so that code
# which must not import torch (the memory prior used by admission) sizes the same model.
TINY_DEFAULTS = {
    "gla": {"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2},
    "mamba": {"hidden_size": 64, "num_hidden_layers": 2, "state_size": 8},
}

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
        if value is None and "None" in str(fields[key].type):
            kwargs[key] = None
            continue
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
    if p.method == "sdlora" and m.family != "mamba":
        raise TrainConfigError("peft.method: sdlora tunes Mamba SSM channels; use it with model.family mamba")
    init = p.init_lora_weights
    if not (isinstance(init, bool) or init in ("gaussian", "pissa", "loraga", "olora")
            or (isinstance(init, str) and init.startswith("pissa_niter_") and init[12:].isdigit())):
        raise TrainConfigError(f"peft.init_lora_weights: must be true, gaussian, pissa, pissa_niter_N "
                               f"or loraga, got {init!r}")
    if p.r < 1:
        raise TrainConfigError(f"peft.r: must be >= 1, got {p.r}")
    if not 0.0 <= p.dropout < 1.0:
        raise TrainConfigError(f"peft.dropout: must be in [0, 1), got {p.dropout}")
    for key in ("batch_size", "max_steps", "eval_every", "save_every", "max_seq_len",
                "log_every", "num_threads", "grad_accum"):
        if getattr(t, key) < 1:
            raise TrainConfigError(f"train.{key}: must be >= 1, got {getattr(t, key)}")
    if t.lr <= 0:
        raise TrainConfigError(f"train.lr: must be > 0, got {t.lr}")
    if t.num_workers < 0:
        raise TrainConfigError(f"train.num_workers: must be >= 0, got {t.num_workers}")
    if t.epochs is not None and t.epochs <= 0:
        raise TrainConfigError(f"train.epochs: must be > 0, got {t.epochs}")
    if t.lr_scheduler is not None and t.lr_scheduler not in SCHEDULERS:
        raise TrainConfigError(f"train.lr_scheduler: must be one of {SCHEDULERS}, got {t.lr_scheduler!r}")
    if not 0.0 <= t.warmup_ratio < 1.0:
        raise TrainConfigError(f"train.warmup_ratio: must be in [0, 1), got {t.warmup_ratio}")
    if t.warmup_steps < 0:
        raise TrainConfigError(f"train.warmup_steps: must be >= 0, got {t.warmup_steps}")
    if t.save_total_limit is not None and (isinstance(t.save_total_limit, bool) or t.save_total_limit < 1):
        raise TrainConfigError(f"train.save_total_limit: must be >= 1 or null (keep all), got {t.save_total_limit}")
    if t.prefetch_factor is not None and t.prefetch_factor < 1:
        raise TrainConfigError(f"train.prefetch_factor: must be >= 1, got {t.prefetch_factor}")
    for key in ("large_dataset_threshold", "eval_accumulation_steps"):
        if getattr(t, key) < 0:
            raise TrainConfigError(f"train.{key}: must be >= 0, got {getattr(t, key)}")
    t.logits_to_keep = parse_logits_to_keep("train.logits_to_keep", t.logits_to_keep)
    t.report_to = parse_report_to("train.report_to", t.report_to)


def parse_logits_to_keep(where: str, value):
    """'auto' (keep what the loss needs), 0 (all positions) or N > 0 (the last N positions)."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low == "auto":
            return "auto"
        if low in ("all", "off", "none"):
            return 0
        try:
            value = int(low)
        except ValueError:
            raise TrainConfigError(f"{where}={value!r}: expected auto, 0/all or a positive integer") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TrainConfigError(f"{where}={value!r}: expected auto, 0/all or a positive integer")
    return value


def parse_report_to(where: str, value) -> list:
    """A tracker name, a comma list or a YAML list -> list of trackers (empty for none)."""
    if isinstance(value, str):
        value = [v.strip().lower() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TrainConfigError(f"{where}={value!r}: expected one of {TRACKERS} or a list of them")
    out = []
    for v in value:
        if v not in TRACKERS:
            raise TrainConfigError(f"{where}: unknown tracker {v!r} (choose from {', '.join(TRACKERS)})")
        if v != "none" and v not in out:
            out.append(v)
    return out


TOP_KEYS = ("name", "model", "peft", "data", "seed", "train", "output_dir", "eval", "data_dir")


def _bool_env(name: str, text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise TrainConfigError(f"{name}={text!r}: expected a boolean (1/0, true/false)")


GLA_TOGGLES = {"GLA_USE_FUSED_SWIGLU": False, "GLA_FORCE_LEFT_PAD": True, "GLA_VERBOSE": False}


def load_peft_spec(name: str) -> dict:
    """A named spec from peft/<name>.yaml|yml|json of the config trees (the user's first), or a
    path to such a file; the engine pins a user tree's spec as its path in job.yaml."""
    path = Path(name).expanduser()
    if not path.is_file():
        dirs = [tree.path / "peft" for tree in config_trees()]
        found = [d / f"{name}{ext}" for d in dirs for ext in (".yaml", ".yml", ".json")
                 if (d / f"{name}{ext}").is_file()]
        if not found:
            known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.y*ml")})
            raise TrainConfigError(f"peft.spec: no spec {name!r} in {' or '.join(map(str, dirs))} "
                                   f"(known: {', '.join(known) or 'none'})")
        path = found[0]
    raw = yaml.safe_load(path.read_text())  # JSON is YAML
    if not isinstance(raw, dict):
        raise TrainConfigError(f"peft.spec: {path} must hold a mapping of peft fields")
    if "spec" in raw:
        raise TrainConfigError(f"peft.spec: {path} may not reference another spec")
    return raw


def expand_targets(targets) -> list:
    """Named sets (QKVO, G, GK, MLP, HEAD, MAMBA_PROJ) -> module names; order kept, no repeats."""
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.replace("+", ",").split(",") if t.strip()]
    out: list = []
    for t in targets:
        for name in TARGET_SETS.get(t, [t]) if isinstance(t, str) else [t]:
            if name not in out:
                out.append(name)
    return out


def _resolve_peft(raw_peft, sources: dict) -> dict:
    """Spec file < inline fields; method shorthands set their flags."""
    raw_peft = dict(raw_peft or {})
    if not isinstance(raw_peft, dict):
        raise TrainConfigError(f"peft: expected a mapping, got {raw_peft!r}")
    merged = {}
    if raw_peft.get("spec"):
        merged.update(load_peft_spec(_check_type("peft.spec", raw_peft["spec"], str)))
        sources["peft.spec"] = raw_peft["spec"]
    merged.update(raw_peft)
    if "target_modules" in merged:
        merged["target_modules"] = expand_targets(merged["target_modules"])
    method = merged.get("method", "lora")
    if method == "dora":
        merged.setdefault("use_dora", True)
    elif method == "rslora":
        merged.setdefault("use_rslora", True)
    elif method == "pissa":
        merged.setdefault("init_lora_weights", "pissa")
    elif method == "loraga":
        merged.setdefault("init_lora_weights", "loraga")
    return merged


def apply_env(raw: dict, environ: dict, sources: dict) -> dict:
    """Overlay the known environment variables on the raw YAML mapping."""
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for name, spec in ENV_FIELDS.items():  # the project's one table (lat_core/config/env.py)
        if environ.get(name, "") == "":
            continue
        try:
            value = parse_env_value(name, environ[name])
        except ValueError as exc:
            raise TrainConfigError(str(exc)) from None
        section, _, key = spec.field.rpartition(".")
        if section:
            if not isinstance(raw.get(section), dict):
                raw[section] = {}
            raw[section][key] = value
        else:
            raw[key] = value
        sources[spec.field] = f"env:{name}"
    if environ.get("HP_DATA"):
        raw["data"] = environ["HP_DATA"].strip()
        sources["data"] = "env:HP_DATA"
    trackers = parse_report_to("train.report_to", (raw.get("train") or {}).get("report_to", "none"))
    for var, name in (("USE_WANDB", "wandb"), ("USE_SWANLAB", "swanlab")):
        if environ.get(var, "") != "" and _bool_env(var, environ[var]) and name not in trackers:
            trackers.append(name)
            sources["train.report_to"] = f"env:{var}"
    if trackers != parse_report_to("x", (raw.get("train") or {}).get("report_to", "none")):
        raw.setdefault("train", {})
        raw["train"] = dict(raw["train"] or {}, report_to=trackers)
    return raw


def parse_config(raw: Any, cfg_path: Path | None = None, environ: dict | None = None) -> JobConfig:
    """Turn the loaded YAML mapping (plus environment overrides) into a validated JobConfig."""
    import os
    environ = dict(os.environ) if environ is None else environ
    if not isinstance(raw, dict):
        raise TrainConfigError("config: the file must hold a YAML mapping")
    for key in raw:
        if key not in TOP_KEYS:
            raise TrainConfigError(f"unknown key '{key}' (allowed: {', '.join(TOP_KEYS)})")
    sources: dict = {}
    raw = dict(raw)
    if isinstance(raw.get("peft"), dict) or raw.get("peft") is None:
        raw["peft"] = _resolve_peft(raw.get("peft"), sources)
    raw = apply_env(raw, environ, sources)
    explicit = {f"{sec}.{k}" for sec in ("model", "train", "eval", "peft")
                if isinstance(raw.get(sec), dict) for k in raw[sec]}
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
    if raw.get("peft") and raw["peft"].get("init_lora_weights") is not None:
        init = raw["peft"]["init_lora_weights"]
        if isinstance(init, str) and init.lower() in ("true", "false"):
            raw["peft"]["init_lora_weights"] = init.lower() == "true"
    gla = {k: (_bool_env(k, environ[k]) if environ.get(k, "") != "" else d) for k, d in GLA_TOGGLES.items()}
    cfg = JobConfig(
        name=name,
        model=_build(ModelConfig, "model", raw.get("model")),
        peft=_build(PeftConfig, "peft", raw.get("peft")),
        data=data, seed=seed,
        train=_build(TrainSection, "train", raw.get("train")),
        output_dir=out.resolve(), cfg_path=cfg_path,
        eval=_build(EvalSection, "eval", raw.get("eval")),
        data_dir=_check_type("data_dir", raw.get("data_dir") or "", str),
        gla=gla, sources=sources, explicit=explicit,
    )
    _validate(cfg)
    return cfg


def _layer(cfg: JobConfig, key: str) -> int:
    """0: default, 1: YAML (job file), 2: environment."""
    if str(cfg.sources.get(key, "")).startswith("env:"):
        return 2
    return 1 if key in cfg.explicit else 0


def resolve_max_steps(cfg: JobConfig, n_train: int) -> tuple[int, str]:
    """(max_steps, why) once the training set size is known.

    train.epochs turns into ceil(epochs x n_train / effective batch). An explicit max_steps set
    at the same layer as epochs or a later one (YAML < env) wins; a default max_steps never does.
    """
    t = cfg.train
    if t.epochs is None:
        return t.max_steps, "max_steps"
    eff = t.batch_size * t.grad_accum
    from_epochs = max(1, math.ceil(t.epochs * n_train / eff))
    ms_layer, ep_layer = _layer(cfg, "train.max_steps"), _layer(cfg, "train.epochs")
    if ms_layer and ms_layer >= ep_layer:
        return t.max_steps, (f"explicit max_steps {t.max_steps} wins over epochs {t.epochs:g} "
                             f"(would be {from_epochs} steps)")
    return from_epochs, (f"epochs {t.epochs:g} x {n_train} examples / effective batch {eff} "
                         f"= {from_epochs} steps")


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
