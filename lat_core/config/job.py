"""The job config: the one typed schema of a training job (``job.yaml``), torch-free.

Why here and in pydantic: the engine resolves every override into ``job.yaml`` and validates it by
building this model (lat_core.front.jobs), admission reads it (lat_core.config.memory_prior) and the trainer
trains it (lat_core.train); all three must agree on every field, type and range. Each field's check is
a kind shared with the environment table (lat_core.config.values), and every error is one line naming
the field (or the variable) and what was expected; the trainer CLI prints it as ``error: <message>``.

A job file with ``resolved: true`` (written by the engine) is final: the trainer applies no
environment on top of it. Without the marker (a file started by hand) the environment variables of
ENV_FIELDS are laid over the file, as the seeds' scripts did.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from lat_core.config import values as V
from lat_core.config.env import ENV_FIELDS, EnvValueError, apply_env
from lat_core.config.peft_specs import PeftSpecError, resolve_peft
from lat_core.config.train_args import args_problem, callbacks_problem
from lat_core.config.user_data import DataSpec, DataSpecError, parse_spec
from lat_core.config.yaml_files import YamlFileError, YamlMapping, read_yaml
from lat_core.errors import ConfigError

PEFT_METHODS = ("lora", "dora", "rslora", "pissa", "loraga", "sdlora")
TINY = "tiny-random"
# Sizes of a tiny-random model that model.tiny does not set. Here, not in train/models.py, so that
# code which must not import torch (the memory prior used by admission) sizes the same model.
TINY_DEFAULTS = {
    "gla": {"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2},
    "mamba": {"hidden_size": 64, "num_hidden_layers": 2, "state_size": 8},
}
TINY_KEYS = {"gla": {"hidden_size", "num_hidden_layers", "num_heads", "vocab_size", "expand_k",
                     "expand_v", "hidden_ratio", "attn_mode"},
             "mamba": {"hidden_size", "num_hidden_layers", "state_size", "vocab_size", "expand", "conv_kernel"}}


class TrainConfigError(ConfigError, ValueError):
    """A job config that cannot run; ``field`` is the dotted field at fault when one is."""

    def __init__(self, message: str, *, field: str | None = None, where: str | None = None):
        super().__init__(message, where=where)
        self.field = field


def _kind(kind: V.Kind, optional: bool = False) -> BeforeValidator:
    return BeforeValidator(lambda v: v if optional and v is None else kind.check(v))


PosInt = Annotated[int, _kind(V.POSITIVE_INT)]
NonNegInt = Annotated[int, _kind(V.NONNEG_INT)]
PosNumber = Annotated[float, _kind(V.POSITIVE_NUMBER)]
Ratio = Annotated[float, _kind(V.RATIO)]
Names = Annotated[list[str], _kind(V.NAMES)]
AutoOrFalse = Union[Literal["auto"], Literal[False]]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ModelConfig(_Section):
    """Which model to fine-tune; ``tiny`` sizes apply only to name_or_path == tiny-random."""
    family: Annotated[str, _kind(V.FAMILY)] = "gla"
    name_or_path: str = TINY
    tiny: YamlMapping = Field(default_factory=dict)  # sizes by name: _family_fits names a wrong key
    dtype: Annotated[str, _kind(V.DTYPE)] = "float32"


class PeftConfig(_Section):
    """Adapter settings, passed through to peft.LoraConfig (see lat_core/train/adapters.py).

    method is a shorthand: dora = lora + use_dora, rslora = lora + use_rslora,
    pissa = lora + init_lora_weights pissa, loraga = gradient-estimated init,
    sdlora = LoRA on projections + selected Mamba SSM channels.
    """
    method: Annotated[str, _kind(V.choice(*PEFT_METHODS))] = "lora"
    spec: str = ""
    r: PosInt = 8
    alpha: Annotated[float, _kind(V.NUMBER)] = 16.0
    dropout: Ratio = 0.0
    target_modules: Names = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    layers: Any = None
    use_dora: bool = False
    use_rslora: bool = False
    init_lora_weights: Annotated[Union[bool, str], _kind(V.INIT_LORA_WEIGHTS)] = True
    loraga_batches: PosInt = 4
    sdlora_warmup_steps: NonNegInt = 10
    sdlora_channel_fraction: Annotated[float, _kind(V.POSITIVE_NUMBER)] = 0.1
    sdlora_state_fraction: Annotated[float, _kind(V.POSITIVE_NUMBER)] = 0.5
    sdlora_params: Names = Field(default_factory=lambda: ["A_log", "D", "dt_proj.bias"])


class EarlyStopping(_Section):
    """Stop when the main validation metric has not improved by more than ``min_delta`` for
    ``patience`` evaluations in a row (transformers' EarlyStoppingCallback; README "Bring your own")."""
    patience: PosInt
    min_delta: Annotated[float, _kind(V.NONNEG_NUMBER)] = 0.0


class TrainSection(_Section):
    """Optimisation and bookkeeping cadence."""
    batch_size: PosInt = 8
    lr: PosNumber = 2e-3
    max_steps: PosInt = 40
    eval_every: PosInt = 20
    save_every: PosInt = 20
    max_seq_len: PosInt = 48
    gradient_checkpointing: bool = False
    num_workers: NonNegInt = 0
    log_every: PosInt = 5
    num_threads: PosInt = 1
    weight_decay: Annotated[float, _kind(V.NONNEG_NUMBER)] = 0.0
    warmup_steps: NonNegInt = 0
    grad_accum: PosInt = 1
    # epochs: when set (and no explicit max_steps at the same or a later layer), max_steps =
    # ceil(epochs x train examples / effective batch); see README "Trainer".
    epochs: Annotated[Optional[float], _kind(V.POSITIVE_NUMBER, optional=True)] = None
    lr_scheduler: Annotated[Optional[str], _kind(V.SCHEDULER, optional=True)] = None
    warmup_ratio: Ratio = 0.0            # used when warmup_steps is 0
    # dataloader; None = not set (a default or the large-dataset choice applies)
    pin_memory: Optional[bool] = None
    persistent_workers: Optional[bool] = None
    prefetch_factor: Annotated[Optional[int], _kind(V.POSITIVE_INT, optional=True)] = None
    large_dataset_threshold: NonNegInt = 200_000
    logits_to_keep: Annotated[Union[Literal["auto"], int], _kind(V.LOGITS_TO_KEEP)] = "auto"
    eval_accumulation_steps: NonNegInt = 0     # move eval results to the host every N batches (0: each)
    save_optimizer_state: bool = True
    # newest checkpoints kept besides the best one; null keeps all
    save_total_limit: Annotated[Optional[int], _kind(V.POSITIVE_INT, optional=True)] = 1
    report_to: Annotated[list[str], _kind(V.TRACKER_LIST)] = Field(default_factory=list)  # [] = none
    # CUDA graphs for the training step (lat_core/train/graphs.py, a fused group's too): auto (the
    # default) captures where it can and says why not elsewhere; false runs the eager step. A graphed
    # curve follows the eager one as closely as another layout of the same math does (bf16 rounding:
    # within 5e-3 over the first 10 steps of GLA-1.3B, bench/RESULTS.md). pack: padding-free packing of a micro-batch
    # into one row through fla's varlen path (eager steps of GLA only; auto: on the CPU, where it
    # wins; true: also on a GPU, where it measured slower). README "Trainer speed modes".
    graphs: Annotated[AutoOrFalse, _kind(V.AUTO_OR_FALSE)] = "auto"
    pack: Annotated[Union[Literal["auto"], bool], _kind(V.AUTO_OR_BOOL)] = "auto"
    # what the user brings (lat_core.config.train_args): TrainingArguments fields LAT does not own,
    # TrainerCallback classes by import path, early stopping on the main metric
    args: YamlMapping = Field(default_factory=dict)
    callbacks: list[str] = Field(default_factory=list)
    early_stopping: Optional[EarlyStopping] = None
    early_stopping_patience: Annotated[Optional[int], _kind(V.POSITIVE_INT, optional=True)] = None  # = early_stopping.patience

    @property
    def stopping(self) -> EarlyStopping | None:
        """Early stopping as set by either spelling (JobConfig._one_early_stopping checks they agree)."""
        if self.early_stopping is None and self.early_stopping_patience is not None:
            return EarlyStopping(patience=self.early_stopping_patience)
        return self.early_stopping


class EvalSection(_Section):
    """Evaluation: generation settings (new-token counts unless use_max_new_tokens is off)."""
    gen_max_length: PosInt = 32
    gen_min_length: NonNegInt = 0
    num_beams: PosInt = 1
    use_max_new_tokens: bool = True
    batch_size: NonNegInt = 0          # 0: train.batch_size
    max_target_len: PosInt = 48        # target tokens kept for generation training


class GlaSection(_Section):
    """fla GLA switches (GLA_USE_FUSED_SWIGLU, GLA_FORCE_LEFT_PAD, GLA_VERBOSE in the environment)."""
    use_fused_swiglu: bool = False
    force_left_pad: bool = True
    verbose: bool = False


class JobConfig(_Section):
    """The whole job file. ``cfg_path``, ``sources`` and ``explicit`` are filled by the parser."""
    name: str
    model: ModelConfig = Field(default_factory=ModelConfig)
    peft: PeftConfig = Field(default_factory=PeftConfig)
    data: Union[str, DataSpec]   # a dataset's name or folder, or a DataSpec (lat_core.config.user_data)
    seed: NonNegInt = 1
    train: TrainSection = Field(default_factory=TrainSection)
    output_dir: Path
    eval: EvalSection = Field(default_factory=EvalSection)
    data_dir: str = ""
    gla: GlaSection = Field(default_factory=GlaSection)
    resolved: bool = False  # written by the engine: the file is final, no environment applies
    cfg_path: Optional[Path] = Field(default=None, exclude=True)
    # field -> where its value came from when not the file ("env:HP_LR", "peft.spec" -> spec name)
    sources: dict[str, str] = Field(default_factory=dict, exclude=True)
    # dotted keys the user set (file or env), e.g. "train.num_workers"; defaults are not listed
    explicit: set[str] = Field(default_factory=set, exclude=True)

    @model_validator(mode="after")
    def _family_fits(self) -> JobConfig:
        allowed = TINY_KEYS[self.model.family]
        for key in self.model.tiny:
            if key not in allowed:
                raise ValueError(f"unknown key 'model.tiny.{key}' for family {self.model.family} "
                                 f"(allowed: {', '.join(sorted(allowed))})")
        if self.peft.method == "sdlora" and self.model.family != "mamba":
            raise ValueError("peft.method: sdlora tunes Mamba SSM channels; use it with model.family mamba")
        problem = args_problem(self.train.args) or callbacks_problem(self.train.callbacks) or self._early_stopping_problem()
        if problem:
            raise ValueError(problem)
        return self

    def _early_stopping_problem(self) -> str | None:
        t = self.train
        if t.early_stopping and t.early_stopping_patience and t.early_stopping.patience != t.early_stopping_patience:
            return (f"train.early_stopping_patience: {t.early_stopping_patience} differs from "
                    f"train.early_stopping.patience {t.early_stopping.patience}; set one of them")
        return None

    @property
    def data_name(self) -> str:
        """The dataset's name in folders, logs, events and tables."""
        return self.data if isinstance(self.data, str) else self.data.display_name


FILE_KEYS = ("name", "model", "peft", "data", "seed", "train", "output_dir", "eval", "data_dir", "gla", "resolved")
_SECTIONS = ("model", "peft", "train", "eval", "gla")
_TYPE_WORDS = {"string_type": "expected a string", "dict_type": "expected a mapping",
               "model_type": "expected a mapping",
               "bool_type": "expected a boolean", "int_type": "expected an integer", "float_type": "expected a number",
               "list_type": "expected a list", "path_type": "expected a path", "string_too_short": "expected a name"}


def parse_config(raw: object, cfg_path: Path | None = None, environ: dict[str, str] | None = None) -> JobConfig:
    """The typed JobConfig of a loaded job mapping; the environment (default: this process's) is laid
    over it unless the mapping says ``resolved: true``."""
    if not isinstance(raw, dict):
        raise TrainConfigError("config: the file must hold a YAML mapping")
    for key in raw:
        if key not in FILE_KEYS:
            raise TrainConfigError(f"unknown key '{key}' (allowed: {', '.join(FILE_KEYS)})", field=str(key))
    sources: dict[str, str] = {}
    raw = _with_peft_resolved(dict(raw), sources)
    if raw.get("resolved") is not True:
        raw = _with_env(raw, dict(os.environ) if environ is None else environ, sources)
    explicit = {f"{sec}.{k}" for sec in _SECTIONS if isinstance(raw.get(sec), dict) for k in raw[sec]}
    if raw.get("data") in (None, ""):
        raise TrainConfigError("data: missing dataset name (e.g. tiny-sst2 or a directory path)", field="data")
    if isinstance(raw["data"], dict):
        raw = {**raw, "data": _data_spec(raw["data"], cfg_path)}
    values = {**raw, "name": raw.get("name", cfg_path.stem if cfg_path else "job"),
              "output_dir": _output_dir(raw.get("output_dir"), cfg_path), "data_dir": raw.get("data_dir") or "",
              "cfg_path": cfg_path, "sources": sources, "explicit": explicit}
    try:
        return JobConfig.model_validate(values)
    except ValidationError as exc:
        field, message = describe(exc.errors()[0])
        raise TrainConfigError(message, field=field) from None


def load_config(path: str | Path) -> JobConfig:
    """Read and validate a job YAML file."""
    path = Path(path)
    if not path.is_file():
        raise TrainConfigError(f"--cfg: no such file {path}")
    try:
        raw = read_yaml(path)
    except YamlFileError as exc:
        raise TrainConfigError(f"--cfg: {exc}") from None
    return parse_config(raw, path)


def _data_spec(raw: dict[object, object], cfg_path: Path | None) -> DataSpec:
    """``data:`` as a mapping; a local path is taken from the job file's folder."""
    try:
        return parse_spec(raw, cfg_path.resolve().parent if cfg_path else Path.cwd())
    except DataSpecError as exc:
        raise TrainConfigError(str(exc), field=exc.field) from None


def _with_peft_resolved(raw: dict[str, Any], sources: dict[str, str]) -> dict[str, Any]:
    if raw.get("peft") is None or isinstance(raw.get("peft"), dict):
        try:
            raw["peft"] = resolve_peft(dict(raw.get("peft") or {}), sources)
        except PeftSpecError as exc:
            raise TrainConfigError(str(exc), field="peft.spec") from None
    return raw


def _with_env(raw: dict[str, Any], environ: dict[str, str], sources: dict[str, str]) -> dict[str, Any]:
    try:
        return apply_env(raw, environ, sources)
    except EnvValueError as exc:
        raise TrainConfigError(str(exc), field=env_field(exc.name)) from None


def env_field(name: str) -> str:
    """The config field a known variable sets (USE_WANDB / USE_SWANLAB add to train.report_to)."""
    return ENV_FIELDS[name].field if name in ENV_FIELDS else "data" if name == "HP_DATA" else "train.report_to"


def _output_dir(value: object, cfg_path: Path | None) -> Path:
    if value:
        if not isinstance(value, str):
            raise TrainConfigError(f"output_dir: expected a path, got {value!r}", field="output_dir")
        return Path(value).expanduser().resolve()
    if cfg_path is None:
        raise TrainConfigError("output_dir: missing and there is no config file to default to", field="output_dir")
    return cfg_path.resolve().parent


def describe(error: ErrorDetails) -> tuple[str, str]:
    """(dotted field, one-line message) of a pydantic error of JobConfig."""
    parts: list[str] = []
    cls: type[BaseModel] | None = JobConfig
    for part in error["loc"]:
        if cls is None or not isinstance(part, str) or part not in cls.model_fields:
            break
        parts.append(part)
        annotation = cls.model_fields[part].annotation
        cls = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    field = ".".join(parts)
    if error["type"] == "extra_forbidden":
        unknown = ".".join([*parts, str(error["loc"][len(parts)])])
        allowed = [k for k, f in (cls or JobConfig).model_fields.items() if not f.exclude]
        return unknown, f"unknown key '{unknown}' (allowed: {', '.join(allowed)})"
    if error["type"] == "missing":
        return field, f"{field}: missing"
    what = _TYPE_WORDS.get(error["type"]) or error["msg"].removeprefix("Value error, ")
    if not field:  # a check across fields (JobConfig._family_fits): the message names the field
        return what.split("'")[1] if what.startswith("unknown key '") else what.split(":")[0], what
    return field, f"{field}: {what}, got {error['input']!r}"


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
