"""Environment overrides with the meanings the seeds' launch scripts gave them.

Known variables map onto config fields with a kind (lat_core.config.values, shared with the job
schema); a value that does not parse or is out of range is an error naming the variable. Every plan
env value (known or not) is also passed to the job's environment, as an argv/env pair, never through
a shell string. Secret values are masked wherever they are shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lat_core.config import values as V
from lat_core.config.values import Kind
from lat_core.contract.kernel_tunings import VARIABLES as KERNEL_TUNING_VARIABLES


class EnvValueError(ValueError):
    """A known variable whose value is not what its field takes; names the variable and the value."""

    def __init__(self, name: str, value: str, problem: str):
        self.name, self.value, self.problem = name, value, problem
        super().__init__(f"{name}={value!r}: {problem}")


@dataclass(frozen=True)
class EnvField:
    field: str  # dotted path in the job config
    kind: Kind  # shared with the job schema (lat_core.config.job): one check per value

    @property
    def expected(self) -> str:
        return self.kind.expected


ENV_FIELDS: dict[str, EnvField] = {
    # The one table of the seeds' variables. The engine applies it once, when it writes job.yaml
    # (lat_core.front.jobs); the trainer applies it only to a job file without ``resolved: true`` (one
    # started by hand), so an engine-launched job trains exactly what its job.yaml says.
    # Later entries for the same field win (HP_LR over HP_LEARNING_RATE, *_STEPS over *_EVERY).
    "HP_BATCH_SIZE": EnvField("train.batch_size", V.POSITIVE_INT),
    "HP_GRAD_ACCUM": EnvField("train.grad_accum", V.POSITIVE_INT),
    "HP_LEARNING_RATE": EnvField("train.lr", V.POSITIVE_NUMBER),
    "HP_LR": EnvField("train.lr", V.POSITIVE_NUMBER),
    "HP_MAX_STEPS": EnvField("train.max_steps", V.POSITIVE_INT),
    "HP_EPOCHS": EnvField("train.epochs", V.POSITIVE_NUMBER),
    "HP_MAX_SEQ_LEN": EnvField("train.max_seq_len", V.POSITIVE_INT),
    "HP_EVAL_EVERY": EnvField("train.eval_every", V.POSITIVE_INT),
    "HP_EVAL_STEPS": EnvField("train.eval_every", V.POSITIVE_INT),
    "HP_SAVE_EVERY": EnvField("train.save_every", V.POSITIVE_INT),
    "HP_SAVE_STEPS": EnvField("train.save_every", V.POSITIVE_INT),
    "HP_LOGGING_STEPS": EnvField("train.log_every", V.POSITIVE_INT),
    "HP_PREC": EnvField("model.dtype", V.DTYPE),
    "HP_SEED": EnvField("seed", V.NONNEG_INT),
    "LR_SCHEDULER_TYPE": EnvField("train.lr_scheduler", V.SCHEDULER),
    "LR_WARMUP_RATIO": EnvField("train.warmup_ratio", V.RATIO),
    "LR_WARMUP_STEPS": EnvField("train.warmup_steps", V.NONNEG_INT),
    "GRADIENT_CHECKPOINTING": EnvField("train.gradient_checkpointing", V.BOOLEAN),
    "LOGITS_TO_KEEP": EnvField("train.logits_to_keep", V.LOGITS_TO_KEEP),
    "EVAL_ACCUMULATION_STEPS": EnvField("train.eval_accumulation_steps", V.NONNEG_INT),
    "SAVE_OPTIMIZER_STATE": EnvField("train.save_optimizer_state", V.BOOLEAN),
    "NUM_DATA_WORKERS": EnvField("train.num_workers", V.NONNEG_INT),
    "DATALOADER_NUM_WORKERS": EnvField("train.num_workers", V.NONNEG_INT),
    "DATALOADER_PIN_MEMORY": EnvField("train.pin_memory", V.BOOLEAN),
    "DATALOADER_PERSISTENT_WORKERS": EnvField("train.persistent_workers", V.BOOLEAN),
    "DATALOADER_PREFETCH_FACTOR": EnvField("train.prefetch_factor", V.POSITIVE_INT),
    "REPORT_TO": EnvField("train.report_to", V.TRACKER_LIST),
    "LAT_JOB_GRAPHS": EnvField("train.graphs", V.AUTO_OR_FALSE),
    "LAT_JOB_PACK": EnvField("train.pack", V.AUTO_OR_BOOL),
    "HP_PEFT_R": EnvField("peft.r", V.POSITIVE_INT),
    "HP_PEFT_ALPHA": EnvField("peft.alpha", V.NUMBER),
    "HP_PEFT_DROPOUT": EnvField("peft.dropout", V.RATIO),
    "HP_INIT": EnvField("peft.init_lora_weights", V.INIT_LORA_WEIGHTS),
    "EVAL_GEN_MAX_LENGTH": EnvField("eval.gen_max_length", V.POSITIVE_INT),
    "EVAL_GEN_MIN_LENGTH": EnvField("eval.gen_min_length", V.NONNEG_INT),
    "EVAL_GEN_NUM_BEAMS": EnvField("eval.num_beams", V.POSITIVE_INT),
    "GLA_USE_MAX_NEW_TOKENS": EnvField("eval.use_max_new_tokens", V.BOOLEAN),
    "GLA_USE_FUSED_SWIGLU": EnvField("gla.use_fused_swiglu", V.BOOLEAN),
    "GLA_FORCE_LEFT_PAD": EnvField("gla.force_left_pad", V.BOOLEAN),
    "GLA_VERBOSE": EnvField("gla.verbose", V.BOOLEAN),
}
#: Switches that add a tracker to train.report_to (the seeds' USE_WANDB=1 / USE_SWANLAB=1; the batch
#: runbook turns SwanLab on with SWANLAB_ENABLE=1).
TRACKER_SWITCHES = {"USE_WANDB": "wandb", "USE_SWANLAB": "swanlab", "SWANLAB_ENABLE": "swanlab"}
#: HP_PISSA_FAST=1: a config whose init is plain "pissa" uses the fast variant (the seeds' trainer did).
PISSA_FAST = ("HP_PISSA_FAST", "pissa", "pissa_niter_4")

#: The old trainer's e-mail notices (runbook 001): SwanLab's e-mail plugin settings in a YAML file
#: (read by lat_core.config.email_yaml) and a switch per event, mapped onto the run's notice kinds
#: (lat_core.notify.KINDS). Each job of the old scripts mailed its own end, done or failed, so
#: ON_FINISH covers a job's failure and OOM too.
EMAIL_YAML_VAR = "SWANLAB_EMAIL_YAML"
NOTICE_SWITCHES = {"SWANLAB_EMAIL_ON_START": ("start",), "SWANLAB_EMAIL_ON_FINISH": ("finish", "failure", "oom"),
                   "SWANLAB_EMAIL_ON_INTERRUPT": ("interrupt",)}
#: A switch left unset: SwanLab's plugin mailed when an experiment stopped, never when it started.
NOTICE_DEFAULTS = {"SWANLAB_EMAIL_ON_START": False, "SWANLAB_EMAIL_ON_FINISH": True,
                   "SWANLAB_EMAIL_ON_INTERRUPT": True}

#: The dual-GPU pretraining scripts' variables (runbook 004) -> lat_core.train.pretrain_config fields.
#: WANDB_RUN=dummy (the scripts' default) logs to no tracker; another value is the W&B run's name.
PRETRAIN_ENV_FIELDS: dict[str, EnvField] = {
    "TORCH_COMPILE": EnvField("compile", V.BOOLEAN),
    "WANDB_RUN": EnvField("wandb_run", V.RUN_NAME),
}

#: The round script's dataset variable (``export DATA=spider-tvt; export HP_SEED=87; bash
#: gla_round_clean.sh E5 all``): it injected ``data: <DATA>`` into every config of the round, seeded by
#: HP_SEED. In LAT the dataset and seed come from a pair, so DATA with HP_SEED is that pair.
DATASET_VAR, SEED_VAR = "DATA", "HP_SEED"

#: Prefixes the seeds used; variables with them are picked up from the launching shell too.
ENV_PREFIXES = ("HP_", "DATALOADER_", "GLA_", "EVAL_GEN_", "LR_", "SWANLAB_", "WANDB_", "LAT_JOB_")
EXTRA_NAMES = ("NUM_DATA_WORKERS", "GRADIENT_CHECKPOINTING", "PYTORCH_CUDA_ALLOC_CONF", "USE_WANDB", "USE_SWANLAB",
               "REPORT_TO", "LOGITS_TO_KEEP", "EVAL_ACCUMULATION_STEPS", "SAVE_OPTIMIZER_STATE",
               # the runbooks' stability settings, put on every command: they act in the job's process
               "TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MALLOC_ARENA_MAX",
               # where the seeds found local data; EVAL_GEN=1 (generation eval) is what LAT always does
               "NLTK_DATA", "GLUE_LOCAL_DIR", "SAMSUM_LOCAL_DIR", "DART_LOCAL_DIR", "SPIDER_LOCAL_DIR", "EVAL_GEN",
               "USE_LIBUV", DATASET_VAR,
               # the trainer's kernel tunings: they travel with the run, not with whichever engine runs it
               *KERNEL_TUNING_VARIABLES)

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


def parse_env_value(name: str, value: str) -> object:
    """Typed, range-checked value of a known variable (ENV_FIELDS, PRETRAIN_ENV_FIELDS, TRACKER_SWITCHES,
    HP_PISSA_FAST or NOTICE_SWITCHES)."""
    tables = (ENV_FIELDS, PRETRAIN_ENV_FIELDS)
    kind = next((t[name].kind for t in tables if name in t), None) or \
        {n: V.BOOLEAN for n in (*TRACKER_SWITCHES, PISSA_FAST[0], *NOTICE_SWITCHES)}[name]
    try:
        return kind.parse_text(value)
    except ValueError as exc:
        raise EnvValueError(name, value, str(exc)) from None


def is_config_variable(name: str) -> bool:
    """A variable that sets a job-config field (resolved into job.yaml), not only the job's env."""
    return name in ENV_FIELDS or name in TRACKER_SWITCHES or name in ("HP_DATA", PISSA_FAST[0])


def apply_env(raw: Mapping[str, object], environ: Mapping[str, str], sources: dict[str, str],
              label: str = "env") -> dict[str, Any]:
    """``raw`` (a job-config mapping) with the known variables of ``environ`` laid over it.

    ``sources`` gets ``field -> "env:NAME"`` for every field set; ``label`` says where ``environ``
    came from, for error messages (EnvValueError names the variable and its value)."""
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for name, spec in ENV_FIELDS.items():
        if environ.get(name, "") != "":
            _set_field(raw, spec.field, parse_env_value(name, environ[name]))
            sources[spec.field] = f"env:{name}"
    if environ.get("HP_DATA", "").strip():
        raw["data"] = environ["HP_DATA"].strip()
        sources["data"] = "env:HP_DATA"
    for name, tracker in TRACKER_SWITCHES.items():
        if environ.get(name, "") != "" and parse_env_value(name, environ[name]):
            trackers = _current_trackers(raw)
            if tracker not in trackers:
                _set_field(raw, "train.report_to", [*trackers, tracker])
                sources["train.report_to"] = f"env:{name}"
    name, plain, fast = PISSA_FAST
    if environ.get(name, "") != "" and parse_env_value(name, environ[name]):
        peft = raw.get("peft")
        if isinstance(peft, dict) and peft.get("init_lora_weights") == plain:
            _set_field(raw, "peft.init_lora_weights", fast)
            sources["peft.init_lora_weights"] = f"env:{name}"
    return raw


def _current_trackers(raw: dict[str, Any]) -> list[object]:
    train = raw.get("train")
    try:
        trackers = V.TRACKER_LIST.check(train.get("report_to", "none") if isinstance(train, dict) else "none")
    except ValueError:
        return []  # the schema names the bad train.report_to when the config is built
    return trackers if isinstance(trackers, list) else []


def _set_field(raw: dict[str, Any], dotted: str, value: object) -> None:
    section, _, key = dotted.rpartition(".")
    if not section:
        raw[key] = value
        return
    if not isinstance(raw.get(section), dict):
        raw[section] = {}
    raw[section][key] = value


def pair_from_env(environ: Mapping[str, str]) -> str | None:
    """``HP_SEED:DATA`` when the launching shell sets DATA (None when it does not); EnvValueError
    naming the variable for a DATA without a usable HP_SEED."""
    dataset = environ.get(DATASET_VAR, "").strip()
    if not dataset:
        return None
    seed = environ.get(SEED_VAR, "").strip()
    if not seed:
        raise EnvValueError(DATASET_VAR, dataset, f"the pair's seed is missing: set {SEED_VAR} too (the round "
                            f"script's seed), or give --pairs SEED:{dataset}")
    return f"{parse_env_value(SEED_VAR, seed)}:{dataset}"


def notice_kinds(environ: Mapping[str, str]) -> list[str] | None:
    """The notice kinds the SWANLAB_EMAIL_ON_* switches ask for (unset ones at NOTICE_DEFAULTS); None
    when neither a switch nor SWANLAB_EMAIL_YAML is set."""
    if not any(environ.get(name, "").strip() for name in (EMAIL_YAML_VAR, *NOTICE_SWITCHES)):
        return None
    kinds: list[str] = []
    for name, covered in NOTICE_SWITCHES.items():
        text = environ.get(name, "").strip()
        if (parse_env_value(name, text) if text else NOTICE_DEFAULTS[name]):
            kinds.extend(covered)
    return kinds


def pretrain_env(environ: Mapping[str, str]) -> dict[str, object]:
    """PretrainConfig field -> typed value, for the pretraining variables the environment sets."""
    return {spec.field: parse_env_value(name, environ[name])
            for name, spec in PRETRAIN_ENV_FIELDS.items() if environ.get(name, "").strip()}


def dataset_overrides(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, dataset) for each of the seeds' dataset variables the environment sets: HP_DATA (the
    trainer's) and DATA (the round script's); both must agree with the plan's pairs."""
    return [(name, environ[name].strip()) for name in ("HP_DATA", DATASET_VAR) if environ.get(name, "").strip()]


def shell_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of the launching shell that the seeds' scripts honoured."""
    return {k: v for k, v in environ.items() if k.startswith(ENV_PREFIXES) or k in EXTRA_NAMES}
