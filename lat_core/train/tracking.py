"""Optional experiment trackers (train.report_to): tensorboard, wandb, swanlab.

The trackers themselves are the HF Trainer's report_to integrations; this module decides which of
them can run.  Why lazy and strict: none of these packages is a dependency.  TensorBoard is a
convenience, so a missing package is a logged note and the run goes on; wandb / swanlab are opt-in
(USE_WANDB=1, USE_SWANLAB=1 or report_to), so asking for one that is not installed is a config error
before training starts.  Only the job's own config goes to a tracker (public_config, plus the
TrainingArguments the integrations log) - never the environment, so API keys (WANDB_API_KEY,
SWANLAB_API_KEY, ...) are read by the packages themselves and never logged.

Run names: every (config, seed, dataset) of a suite is its own tracker run, named
`config@seed:dataset`, grouped by config (so a config's seeds and datasets sit together), tagged
`suite:<suite>`, `dataset:<dataset>`, `seed:<seed>`.  The trackers take them as the Trainer's
run_name (W&B `name`, SwanLab `experiment_name`) and from their own variables, which a user's own
setting beats: WANDB_RUN_GROUP / WANDB_TAGS, SWANLAB_GROUP / SWANLAB_TAGS (comma-separated);
TensorBoard gets one log folder per run, `<output_dir>/tensorboard/<name>`.  The seeds' explicit
names (WANDB_NAME, SWANLAB_EXPERIMENT_NAME) still win; SWANLAB_EXPERIMENT_PREFIX prefixes the name.
The suite comes from LAT_SUITE, which the engine sets for every job it launches.

One run per job across its attempts (resumes continue it, a fresh start makes a new one):
tracker_run.py, through ``Trackers.open_run``.
"""
from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lat_core.config.job import JobConfig, TrainConfigError
from .tracker_run import TrackerRun, open_tracker_run

# the seeds' SwanLab variables; swanlab and the HF integration read them from the environment,
# SWANLAB_EXPERIMENT_NAME becomes the Trainer's run_name
SWANLAB_INIT_ENV = {"SWANLAB_PROJECT": "project", "SWANLAB_WORKSPACE": "workspace",
                    "SWANLAB_EXPERIMENT_NAME": "experiment_name", "SWANLAB_MODE": "mode"}


SUITE_VAR = "LAT_SUITE"
REPEAT = re.compile(r"__rep\d+$")   # jobs.py: a config repeated for one pair is <stem>__repK


@dataclass(frozen=True)
class RunNaming:
    name: str
    group: str
    tags: tuple[str, ...]

    def folder(self) -> str:
        """The name as one path component (TensorBoard's log folder)."""
        return re.sub(r"[^\w.@:+-]", "_", self.name).replace(":", "_")


def run_naming(config: str, seed: int, dataset: str, suite: str = "") -> RunNaming:
    """`config@seed:dataset`, grouped by config (a repeat's __repK dropped), tagged with suite,
    dataset and seed.  A dataset given as a directory is named by its last component."""
    data = os.path.basename(os.path.normpath(dataset)) if os.sep in dataset else dataset
    tags = ((f"suite:{suite}",) if suite else ()) + (f"dataset:{data}", f"seed:{seed}")
    return RunNaming(f"{config}@{seed}:{data}", REPEAT.sub("", config), tags)


def public_config(cfg: JobConfig) -> dict:
    """The job config as plain data (no environment, so no secrets)."""
    return {"name": cfg.name, "data": cfg.data_name, "seed": cfg.seed,
            **cfg.model_dump(mode="json", include={"model", "peft", "train", "eval"})}


class Trackers:
    """Which report_to integrations run (`active`, for TrainingArguments.report_to), the notes
    about skipped ones, and the run name; sets the trackers' directory defaults under the job dir."""

    def __init__(self, cfg: JobConfig, log, environ: dict | None = None):
        environ = os.environ if environ is None else environ
        self.environ = environ
        self.active: list[str] = []
        self.notes: list[str] = []
        self.naming = run_naming(cfg.name, cfg.seed, cfg.data_name, environ.get(SUITE_VAR, ""))
        self.run_name = self.naming.name
        out = Path(cfg.output_dir)
        tags = ",".join(self.naming.tags)
        for name in cfg.train.report_to:
            if name == "tensorboard":
                try:   # what transformers' TensorBoardCallback imports
                    importlib.import_module("torch.utils.tensorboard")
                except ImportError as exc:
                    self.notes.append(f"report_to tensorboard skipped: {exc} (pip install tensorboard)")
                    continue
                environ.setdefault("TENSORBOARD_LOGGING_DIR", str(out / "tensorboard" / self.naming.folder()))
            elif name == "wandb":
                _require("wandb", "USE_WANDB=1 / train.report_to wandb")
                environ.setdefault("WANDB_PROJECT", "lat")
                environ.setdefault("WANDB_DIR", str(out))
                environ.setdefault("WANDB_RUN_GROUP", self.naming.group)
                environ.setdefault("WANDB_TAGS", tags)
                # the Trainer's run_name beats WANDB_NAME in wandb.init, so a set one is taken here
                self.run_name = environ.get("WANDB_NAME") or self.run_name
            elif name == "swanlab":
                _require("swanlab", "USE_SWANLAB=1 / SWANLAB_ENABLE=1 / train.report_to swanlab")
                # the batch runbook spells swanlab's SWANLAB_LOG_DIR as SWANLAB_LOGDIR
                environ.setdefault("SWANLAB_LOG_DIR", environ.get("SWANLAB_LOGDIR") or str(out / "swanlab"))
                environ.setdefault("SWANLAB_GROUP", self.naming.group)
                environ.setdefault("SWANLAB_TAGS", tags)
                self.run_name = (environ.get("SWANLAB_EXPERIMENT_NAME")
                                 or environ.get("SWANLAB_EXPERIMENT_PREFIX", "") + self.run_name)
            self.active.append(name)
        for note in self.notes:
            log(note)

    def open_run(self, job_dir: Path, resume: bool) -> TrackerRun | None:
        """The job's tracker run for this attempt (continued on resume, else new; None without an
        active tracker), its id set where the trackers read it.  Only the job's owner calls this:
        the trainer's main process, a fused group for its member."""
        if not self.active:
            return None
        run = open_tracker_run(job_dir, resume)
        self.environ.update(run.environ(self.active))   # LAT's, not a user's: one job, one run
        return run


def _require(module: str, why: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrainConfigError(f"train.report_to: {module} tracking was requested ({why}) but the "
                               f"{module} package is not installed; pip install {module}, or unset it") from None
