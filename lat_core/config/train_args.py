"""The Trainer pieces a user brings: ``train.args`` (fields of transformers' TrainingArguments that
LAT does not set itself), ``train.callbacks`` (TrainerCallback classes by import path) and
``train.early_stopping``; torch-free, so the job schema and the plan's preflight check them before
anything starts.

Why a deny-list: LAT builds the TrainingArguments of every job from its own fields (the cadence of
logs, evaluations and checkpoints that the engine, results and --resume read; the seeds; the
optimizer and its schedule, which it passes to the Trainer ready-made, so the Trainer would ignore
``optim`` or ``adam_beta1`` without a word). A field LAT owns given in ``train.args`` would either
fight LAT's value or be ignored; it is refused, naming the LAT field to use instead. Every other
field is passed through; the trainer, which may import transformers, refuses a name TrainingArguments
does not have (naming the closest one): lat_core.train.hf_trainer.user_arguments.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from importlib.machinery import ModuleSpec

_OPTIMIZER = "LAT builds AdamW itself: train.lr, train.weight_decay"
_SCHEDULE = "train.lr_scheduler, train.warmup_steps / train.warmup_ratio"
_LOADER = "LAT's own seeded loader: train.num_workers, pin_memory, persistent_workers, prefetch_factor"
_EVAL = "LAT evaluates itself every train.eval_every steps"
_BEST = "LAT keeps best/ by the dataset's main metric (data.metric); train.early_stopping stops on it"
_HUB = "LAT writes adapters to the job's folder; push them yourself afterwards"
_DEVICES = "the plan's gpus / gpus_per_job"
_DATA = "LAT's train loader and evaluation read the data as the job config says (data:)"

#: TrainingArguments fields that LAT sets from its own config -> what to use instead.
OWNED: dict[str, str] = {
    "output_dir": "output_dir (the job's folder; the plan's output_root)", "run_name": "name",
    "seed": "seed (the plan's pairs)", "data_seed": "seed (the plan's pairs)",
    "max_steps": "train.max_steps", "num_train_epochs": "train.epochs",
    "per_device_train_batch_size": "train.batch_size", "per_device_eval_batch_size": "eval.batch_size",
    "gradient_accumulation_steps": "train.grad_accum", "auto_find_batch_size": "train.batch_size",
    "learning_rate": "train.lr", "weight_decay": "train.weight_decay",
    "lr_scheduler_type": _SCHEDULE, "lr_scheduler_kwargs": _SCHEDULE, "warmup_steps": _SCHEDULE,
    "optim": _OPTIMIZER, "optim_args": _OPTIMIZER, "optim_target_modules": _OPTIMIZER,
    "adam_beta1": _OPTIMIZER, "adam_beta2": _OPTIMIZER, "adam_epsilon": _OPTIMIZER,
    "bf16": "model.dtype (HP_PREC)", "fp16": "model.dtype (HP_PREC)", "bf16_full_eval": "model.dtype (HP_PREC)",
    "fp16_full_eval": "model.dtype (HP_PREC)",
    "gradient_checkpointing": "train.gradient_checkpointing",
    "gradient_checkpointing_kwargs": "train.gradient_checkpointing",
    "activation_checkpointing": "train.gradient_checkpointing",
    "activation_checkpointing_kwargs": "train.gradient_checkpointing",
    "logging_strategy": "train.log_every", "logging_steps": "train.log_every",
    "logging_first_step": "train.log_every", "logging_nan_inf_filter": "train.log_every (LAT checks the loss)",
    "disable_tqdm": "train.log_every", "report_to": "train.report_to",
    "eval_strategy": "train.eval_every", "eval_steps": "train.eval_every",
    "eval_accumulation_steps": "train.eval_accumulation_steps", "prediction_loss_only": _EVAL,
    "eval_do_concat_batches": _EVAL, "include_for_metrics": _EVAL, "batch_eval_metrics": _EVAL,
    "save_strategy": "train.save_every", "save_steps": "train.save_every",
    "save_total_limit": "train.save_total_limit", "save_only_model": "train.save_optimizer_state",
    "load_best_model_at_end": _BEST, "metric_for_best_model": _BEST, "greater_is_better": _BEST,
    "resume_from_checkpoint": "--resume (the plan's resume)", "ignore_data_skip": "--resume",
    "restore_callback_states_from_checkpoint": "--resume",
    "push_to_hub": _HUB, "hub_token": _HUB, "hub_private_repo": _HUB, "hub_model_id": _HUB,
    "hub_strategy": _HUB, "hub_always_push": _HUB, "hub_revision": _HUB,
    "use_cpu": _DEVICES, "local_rank": _DEVICES, "ddp_backend": _DEVICES,
    "ddp_find_unused_parameters": _DEVICES, "accelerator_config": "train.pin_memory",
    "dataloader_num_workers": _LOADER, "dataloader_pin_memory": _LOADER,
    "dataloader_persistent_workers": _LOADER, "dataloader_prefetch_factor": _LOADER,
    "dataloader_drop_last": _LOADER, "train_sampling_strategy": _LOADER, "group_by_length": _LOADER,
    "remove_unused_columns": _DATA, "label_names": _DATA, "length_column_name": _DATA,
    "do_train": "the job trains (python -m lat_core.train)", "do_eval": _EVAL, "do_predict": _EVAL,
}

_CALLBACK_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def args_problem(args: Mapping[object, object]) -> str | None:
    """What is wrong with ``train.args`` that needs no transformers (a key LAT owns), or None."""
    for key in args:
        if not isinstance(key, str):
            return f"train.args: keys are TrainingArguments field names, got {key!r}"
        if key in OWNED:
            return f"train.args.{key}: LAT sets it itself; use {OWNED[key]} instead"
    return None


def callbacks_problem(paths: list[str]) -> str | None:
    """The first entry of ``train.callbacks`` that is not written ``package.module:ClassName``."""
    for i, path in enumerate(paths):
        if not _CALLBACK_PATH.match(path):
            return f"train.callbacks[{i}]: expected 'package.module:ClassName', got {path!r}"
    return None


def split_callback(path: str) -> tuple[str, str]:
    """``pkg.mod:Outer.Inner`` -> (``pkg.mod``, ``Outer.Inner``)."""
    module, _, attr = path.partition(":")
    return module, attr


def missing_module(path: str, environ: Mapping[str, str]) -> str | None:
    """Why the module of callback ``path`` cannot be imported by the job, or None: looked up on the
    job's PYTHONPATH and this interpreter's path without running any of its code (the preflight runs
    in the front end, which must not import a user's module and, with it, torch)."""
    module, _ = split_callback(path)
    extra = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    search = extra + _sys_path()
    parts = module.split(".")
    for depth in range(len(parts)):
        name = ".".join(parts[:depth + 1])
        spec = _find(name, search, top=depth == 0)
        if spec is None:
            return f"train.callbacks: cannot import {path!r}: no module {name!r} on the job's Python path"
        search = list(spec.submodule_search_locations or [])
        if depth < len(parts) - 1 and not search:
            return f"train.callbacks: cannot import {path!r}: {name!r} is a module, not a package"
    return None


def _sys_path() -> list[str]:
    return [p for p in sys.path if p]


def _find(name: str, search: list[str], top: bool) -> ModuleSpec | None:
    """The spec of ``name`` in ``search`` (a package's folders below the top); a top-level module
    already loaded or built in is found where Python has it."""
    if top and (name in sys.builtin_module_names or name in sys.modules):
        return importlib.util.find_spec(name)
    return importlib.machinery.PathFinder.find_spec(name, search)
