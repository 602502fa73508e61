"""Every file name of a job folder, in one place.

A job folder (``<output root>/<data>_seed<seed>/<config>``) holds what the front end wrote when it
planned the job, what the trainer writes, and, in ``.lat/``, what the runner and the engine keep
about each attempt. Processes find each other's files by these names only.
"""

from __future__ import annotations

import re

# written when the job is planned (lat_core.front.jobs)
JOB_YAML = "job.yaml"
OVERRIDES = "overrides.json"
COMMAND = "command.json"

# written by the trainer
EVENTS = "events.jsonl"
TRAIN_LOG = "train.log"  # the trainer's stdout and stderr, and the runner's [lat] lines
ENV_RECORD = "env.json"
FINAL = "final"
BEST = "best"
PREDICTIONS = "predictions"
TOKENIZER = "tokenizer"
INITIAL_ADAPTER = "adapter_init"   # the adapter as initialised, before any step (lat_core/train/portable.py)
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"  # a checkpoint's last file: a folder without it is a save cut short
LAT_STATE = "lat_state.json"  # a checkpoint's LAT fields (best, validation scores, step, optimizer saved)
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # what every resume path loads (peft's file name)
ADAPTER_CONFIG = "adapter_config.json"  # peft's
EXTRA_TRAINABLE = "extra_trainable.safetensors"  # trained weights peft does not own (SDLoRA's SSM entries)
RNG_STATE = "rng_state.pt"
OPTIMIZER_STATE = "optimizer.pt"
# the job's experiment-tracker run ({"id": ...}): every resume continues that run (lat_core/train/tracking.py)
TRACKER_RUN = "tracker_run.json"
# what --overwrite deletes besides the checkpoints: a run's outputs, never the planned files
RUN_OUTPUTS = (EVENTS, TOKENIZER, PREDICTIONS, BEST, FINAL, INITIAL_ADAPTER)

# kept by the runner and the engine, per attempt
RUNNER_DIR = ".lat"
EXIT_SUFFIX = ".exit.json"
PID_SUFFIX = ".pid"  # beside an exit record: the runner's pid, start time and containment
GROUP_REF_SUFFIX = ".group"  # beside a fused member's exit record: its group's (GroupRef)
ATTEMPT_EXIT = re.compile(r"^attempt-(\d+)\.exit\.json$")
GROUP_EXIT = re.compile(r"^group-attempt-(\d+)\.exit\.json$")
CANCEL_MARKER = "cancel"  # a fused member's cancel: its group leaves it out before its next micro-batch
PEAK_USAGE = "usage.json"
PRUNED = "pruned.json"  # why the plan's sweep ended the job or never started it (lat_core.engine.promotion)
GROUP_LIMIT = "fuse-limit.json"
OLD_RUNS_ALONE = "fuse-alone"  # an older engine's mark: the job runs alone


def checkpoint_folder(step: int) -> str:
    """The folder name of the checkpoint saved at ``step`` (what ``CHECKPOINT`` matches)."""
    return f"checkpoint-{step}"


def attempt_exit(n: int) -> str:
    return f"attempt-{n}{EXIT_SUFFIX}"


def group_exit(n: int) -> str:
    return f"group-attempt-{n}{EXIT_SUFFIX}"
