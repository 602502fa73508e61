"""Optional experiment trackers (train.report_to): tensorboard, wandb, swanlab.

The trackers themselves are the HF Trainer's report_to integrations; this module decides which of
them can run.  Why lazy and strict: none of these packages is a dependency.  TensorBoard is a
convenience, so a missing package is a logged note and the run goes on; wandb / swanlab are opt-in
(USE_WANDB=1, USE_SWANLAB=1 or report_to), so asking for one that is not installed is a config error
before training starts.  Only the job's own config goes to a tracker (public_config, plus the
TrainingArguments the integrations log) - never the environment, so API keys (WANDB_API_KEY,
SWANLAB_API_KEY, ...) are read by the packages themselves and never logged.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path

from lat_core.config.job import JobConfig, TrainConfigError

# the seeds' SwanLab variables; swanlab and the HF integration read them from the environment,
# SWANLAB_EXPERIMENT_NAME becomes the Trainer's run_name
SWANLAB_INIT_ENV = {"SWANLAB_PROJECT": "project", "SWANLAB_WORKSPACE": "workspace",
                    "SWANLAB_EXPERIMENT_NAME": "experiment_name", "SWANLAB_MODE": "mode"}


def public_config(cfg: JobConfig) -> dict:
    """The job config as plain data (no environment, so no secrets)."""
    return {"name": cfg.name, "data": cfg.data, "seed": cfg.seed,
            **cfg.model_dump(mode="json", include={"model", "peft", "train", "eval"})}


class Trackers:
    """Which report_to integrations run (`active`, for TrainingArguments.report_to), the notes
    about skipped ones, and the run name; sets the trackers' directory defaults under the job dir."""

    def __init__(self, cfg: JobConfig, log, environ: dict | None = None):
        environ = os.environ if environ is None else environ
        self.active: list[str] = []
        self.notes: list[str] = []
        self.run_name = cfg.name
        out = Path(cfg.output_dir)
        for name in cfg.train.report_to:
            if name == "tensorboard":
                try:   # what transformers' TensorBoardCallback imports
                    importlib.import_module("torch.utils.tensorboard")
                except ImportError as exc:
                    self.notes.append(f"report_to tensorboard skipped: {exc} (pip install tensorboard)")
                    continue
                environ.setdefault("TENSORBOARD_LOGGING_DIR", str(out / "tensorboard"))
            elif name == "wandb":
                _require("wandb", "USE_WANDB=1 / train.report_to wandb")
                environ.setdefault("WANDB_PROJECT", "lat")
                environ.setdefault("WANDB_DIR", str(out))
            elif name == "swanlab":
                _require("swanlab", "USE_SWANLAB=1 / SWANLAB_ENABLE=1 / train.report_to swanlab")
                # the batch runbook spells swanlab's SWANLAB_LOG_DIR as SWANLAB_LOGDIR
                environ.setdefault("SWANLAB_LOG_DIR", environ.get("SWANLAB_LOGDIR") or str(out / "swanlab"))
                self.run_name = environ.get("SWANLAB_EXPERIMENT_NAME") or \
                    environ.get("SWANLAB_EXPERIMENT_PREFIX", "") + cfg.name
            self.active.append(name)
        for note in self.notes:
            log(note)


def _require(module: str, why: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrainConfigError(f"train.report_to: {module} tracking was requested ({why}) but the "
                               f"{module} package is not installed; pip install {module}, or unset it") from None
