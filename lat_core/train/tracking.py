"""Optional experiment trackers (train.report_to): tensorboard, wandb, swanlab.

Why lazy and strict: none of these packages is a dependency.  TensorBoard is a convenience, so a
missing package is a logged note and the run goes on; wandb / swanlab are opt-in (USE_WANDB=1,
USE_SWANLAB=1 or report_to), so asking for one that is not installed is a config error before
training starts.  Only the job's own config goes to a tracker - never the environment, so API
keys (WANDB_API_KEY, SWANLAB_API_KEY, ...) are read by the packages themselves and never logged.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path

from .config import JobConfig, TrainConfigError

SWANLAB_INIT_ENV = {"SWANLAB_PROJECT": "project", "SWANLAB_WORKSPACE": "workspace",
                    "SWANLAB_EXPERIMENT_NAME": "experiment_name", "SWANLAB_MODE": "mode"}


def public_config(cfg: JobConfig) -> dict:
    """The job config as plain data (no environment, so no secrets)."""
    return {"name": cfg.name, "data": cfg.data, "seed": cfg.seed,
            "model": dataclasses.asdict(cfg.model), "peft": dataclasses.asdict(cfg.peft),
            "train": dataclasses.asdict(cfg.train), "eval": dataclasses.asdict(cfg.eval)}


class Trackers:
    """Fan scalars out to every active tracker; `active` names them."""

    def __init__(self, cfg: JobConfig, log, environ: dict | None = None):
        environ = dict(os.environ) if environ is None else environ
        self.active: list[str] = []
        self.notes: list[str] = []
        self._tb = self._wandb = self._swan = None
        for name in cfg.train.report_to:
            if name == "tensorboard":
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError as exc:
                    self.notes.append(f"report_to tensorboard skipped: {exc} (pip install tensorboard)")
                    continue
                self._tb = SummaryWriter(log_dir=str(Path(cfg.output_dir) / "tensorboard"))
            elif name == "wandb":
                wandb = _require("wandb", "USE_WANDB=1 / train.report_to wandb")
                self._wandb = wandb.init(project=environ.get("WANDB_PROJECT") or "lat", name=cfg.name,
                                         dir=str(cfg.output_dir), config=public_config(cfg))
            elif name == "swanlab":
                swanlab = _require("swanlab", "USE_SWANLAB=1 / train.report_to swanlab")
                kwargs = {arg: environ[var] for var, arg in SWANLAB_INIT_ENV.items() if environ.get(var)}
                kwargs.setdefault("experiment_name", cfg.name)
                self._swan = swanlab
                swanlab.init(config=public_config(cfg), logdir=str(Path(cfg.output_dir) / "swanlab"), **kwargs)
            self.active.append(name)
        for note in self.notes:
            log(note)

    def log(self, scalars: dict, step: int) -> None:
        values = {k: float(v) for k, v in scalars.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self._tb is not None:
            for k, v in values.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(values, step=step)
        if self._swan is not None:
            self._swan.log(values, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._swan is not None:
            self._swan.finish()


def _require(module: str, why: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrainConfigError(f"train.report_to: {module} tracking was requested ({why}) but the "
                               f"{module} package is not installed; pip install {module}, or unset it") from None
