"""Environment overrides with the meanings the seeds' launch scripts gave them.

Known variables map onto config fields with a type; a value that does not parse is an error naming
the variable. Every plan env value (known or not) is also passed to the job's environment, as an
argv/env pair, never through a shell string. Secret values are masked wherever they are shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_positive_int(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError("expected a positive integer")
    return value


def _parse_float(text: str) -> float:
    return float(text.strip())


def _parse_nonneg_int(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError("expected an integer >= 0")
    return value


def _parse_positive_float(text: str) -> float:
    value = float(text.strip())
    if value <= 0:
        raise ValueError("expected a number > 0")
    return value


def _parse_ratio(text: str) -> float:
    value = float(text.strip())
    if not 0 <= value < 1:
        raise ValueError("expected a number in [0, 1)")
    return value


_PRECISIONS = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
               "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32"}


def _parse_precision(text: str) -> str:
    key = text.strip().lower()
    if key not in _PRECISIONS:
        raise ValueError("expected bf16, fp16 or fp32")
    return _PRECISIONS[key]


def _parse_choice(*choices: str):
    def parse(text: str) -> str:
        if text.strip().lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return text.strip().lower()

    return parse


def _parse_logits_to_keep(text: str):
    """'auto' (what the loss needs), 0/all (every position) or N (the last N positions)."""
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    return 0 if value in ("all", "off", "none") else _parse_nonneg_int(value)


TRACKERS = ("none", "tensorboard", "wandb", "swanlab")


def _parse_trackers(text: str) -> list[str]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise ValueError(f"unknown tracker {unknown[0]!r} (choose from {', '.join(TRACKERS)})")
    return [n for n in dict.fromkeys(names) if n != "none"]


@dataclass(frozen=True)
class EnvField:
    field: str  # dotted path in the job config
    parse: Callable[[str], object]
    expected: str


ENV_FIELDS: dict[str, EnvField] = {
    # The one table of the seeds' variables: the engine applies it when it writes job.yaml, the
    # trainer applies it again from its own environment (so a job started by hand honours it too).
    # Later entries for the same field win (HP_LR over HP_LEARNING_RATE, *_STEPS over *_EVERY).
    "HP_BATCH_SIZE": EnvField("train.batch_size", _parse_positive_int, "a positive integer"),
    "HP_GRAD_ACCUM": EnvField("train.grad_accum", _parse_positive_int, "a positive integer"),
    "HP_LEARNING_RATE": EnvField("train.lr", _parse_float, "a number"),
    "HP_LR": EnvField("train.lr", _parse_float, "a number"),
    "HP_MAX_STEPS": EnvField("train.max_steps", _parse_positive_int, "a positive integer"),
    "HP_EPOCHS": EnvField("train.epochs", _parse_positive_float, "a number > 0"),
    "HP_MAX_SEQ_LEN": EnvField("train.max_seq_len", _parse_positive_int, "a positive integer"),
    "HP_EVAL_EVERY": EnvField("train.eval_every", _parse_positive_int, "a positive integer"),
    "HP_EVAL_STEPS": EnvField("train.eval_every", _parse_positive_int, "a positive integer"),
    "HP_SAVE_EVERY": EnvField("train.save_every", _parse_positive_int, "a positive integer"),
    "HP_SAVE_STEPS": EnvField("train.save_every", _parse_positive_int, "a positive integer"),
    "HP_LOGGING_STEPS": EnvField("train.log_every", _parse_positive_int, "a positive integer"),
    "HP_PREC": EnvField("model.dtype", _parse_precision, "bf16, fp16 or fp32"),
    "HP_SEED": EnvField("seed", _parse_nonneg_int, "an integer >= 0"),
    "LR_SCHEDULER_TYPE": EnvField("train.lr_scheduler", _parse_choice("constant", "linear", "cosine", "constant_with_warmup"),
                                  "constant, linear, cosine or constant_with_warmup"),
    "LR_WARMUP_RATIO": EnvField("train.warmup_ratio", _parse_ratio, "a number in [0, 1)"),
    "LR_WARMUP_STEPS": EnvField("train.warmup_steps", _parse_nonneg_int, "an integer >= 0"),
    "GRADIENT_CHECKPOINTING": EnvField("train.gradient_checkpointing", _parse_bool, "a boolean (1/0, true/false)"),
    "LOGITS_TO_KEEP": EnvField("train.logits_to_keep", _parse_logits_to_keep, "auto, all or an integer >= 0"),
    "EVAL_ACCUMULATION_STEPS": EnvField("train.eval_accumulation_steps", _parse_nonneg_int, "an integer >= 0"),
    "SAVE_OPTIMIZER_STATE": EnvField("train.save_optimizer_state", _parse_bool, "a boolean (1/0, true/false)"),
    "NUM_DATA_WORKERS": EnvField("train.num_workers", _parse_nonneg_int, "an integer >= 0"),
    "DATALOADER_NUM_WORKERS": EnvField("train.num_workers", _parse_nonneg_int, "an integer >= 0"),
    "DATALOADER_PIN_MEMORY": EnvField("train.pin_memory", _parse_bool, "a boolean (1/0, true/false)"),
    "DATALOADER_PERSISTENT_WORKERS": EnvField("train.persistent_workers", _parse_bool, "a boolean (1/0, true/false)"),
    "DATALOADER_PREFETCH_FACTOR": EnvField("train.prefetch_factor", _parse_positive_int, "a positive integer"),
    "REPORT_TO": EnvField("train.report_to", _parse_trackers, "none, tensorboard, wandb or swanlab (comma list)"),
    "HP_PEFT_R": EnvField("peft.r", _parse_positive_int, "a positive integer"),
    "HP_PEFT_ALPHA": EnvField("peft.alpha", _parse_float, "a number"),
    "HP_PEFT_DROPOUT": EnvField("peft.dropout", _parse_float, "a number"),
    "HP_INIT": EnvField("peft.init_lora_weights", str.strip, "an init name (gaussian, pissa, pissa_niter_N, loraga, ...)"),
    "EVAL_GEN_MAX_LENGTH": EnvField("eval.gen_max_length", _parse_positive_int, "a positive integer"),
    "EVAL_GEN_MIN_LENGTH": EnvField("eval.gen_min_length", _parse_nonneg_int, "an integer >= 0"),
    "EVAL_GEN_NUM_BEAMS": EnvField("eval.num_beams", _parse_positive_int, "a positive integer"),
    "GLA_USE_MAX_NEW_TOKENS": EnvField("eval.use_max_new_tokens", _parse_bool, "a boolean (1/0, true/false)"),
}

#: Prefixes the seeds used; variables with them are picked up from the launching shell too.
ENV_PREFIXES = ("HP_", "DATALOADER_", "GLA_", "EVAL_GEN_", "LR_", "SWANLAB_", "WANDB_", "LAT_JOB_")
EXTRA_NAMES = ("NUM_DATA_WORKERS", "GRADIENT_CHECKPOINTING", "PYTORCH_CUDA_ALLOC_CONF", "USE_WANDB", "USE_SWANLAB",
               "REPORT_TO", "LOGITS_TO_KEEP", "EVAL_ACCUMULATION_STEPS", "SAVE_OPTIMIZER_STATE")

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_RE = re.compile(r"(API_?KEY|TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|SMTP_PASS|MAIL_PASS)", re.I)
MASK = "***"


def is_valid_name(name: str) -> bool:
    return bool(_NAME_RE.match(name))


def is_secret(name: str) -> bool:
    return bool(_SECRET_RE.search(name)) or name in {"SWANLAB_KEY", "WANDB_KEY"}


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """A copy safe to show, log or save: secret values replaced by ``***``."""
    return {k: (MASK if is_secret(k) else v) for k, v in env.items()}


def parse_env_value(name: str, value: str):
    """Typed value of a known variable; ValueError with the expectation when it does not parse."""
    spec = ENV_FIELDS[name]
    try:
        return spec.parse(value)
    except ValueError as exc:
        raise ValueError(f"{name}={value!r}: expected {spec.expected}") from exc


def shell_overrides(environ: dict[str, str]) -> dict[str, str]:
    """The variables of the launching shell that the seeds' scripts honoured."""
    return {k: v for k, v in environ.items() if k.startswith(ENV_PREFIXES) or k in EXTRA_NAMES}
