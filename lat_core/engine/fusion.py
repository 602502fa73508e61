"""Fused groups on the engine's side (plan ``fuse``, ``auto`` by default): which queued jobs may share one trainer
process (lat_core/train/fused), the group's command, and the file that ties a member's attempt to
the group's process.

A member keeps its own attempt row and exit record (the fused trainer writes it when the member
leaves the group); the group's runner writes the group's own exit record, in its first member's
folder (``JobDir.group_attempt``). Each member's group ref (``GroupRef``, beside its exit record)
names that record, so reaping, cancel and recovery know, from the job's folder alone (an engine
restart included), that the attempt's process is shared.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from lat_core.config.fuse import fuse_key, refusal
from lat_core.config.fuse_measured import auto_refusal
from lat_core.config.job import parse_config
from lat_core.contract.devices import Device
from lat_core.errors import ConfigError
from lat_core.contract.jobdir import GroupLimit, JobDir
from lat_core.contract.jobdir.names import JOB_YAML
from lat_core.contract.rows import JobRow
from lat_core.contract.saved_plan import SavedPlan
from lat_core.contract.trainer_modes import mode_of

GROUP_SIZE_LIMIT = 8  # members of one group; more rarely pays (issue 17: 8 jobs of a suite)
MATE_SCAN = 256  # queued jobs read after a group's first member to find its mates
TRAIN_MODULE = ["-m", "lat_core.train", "--cfg"]


def jobs_see_no_gpu(device: Device) -> bool:
    """A device whose jobs run on CPUs: this host's CPU, or a Slurm plan's cluster with ``gres: none``
    (its pin hides every GPU), where ``fuse: auto`` runs a process per job as on the CPU here."""
    return device.is_cpu or device.env.get("CUDA_VISIBLE_DEVICES") == ""


def fuses_on(plan: SavedPlan, device_is_cpu: bool) -> bool:
    """Whether the saved plan's ``fuse`` (lat_core.front.plan.Plan.fuse) groups jobs on such a device:
    ``auto`` on GPUs, ``true`` everywhere, ``false`` nowhere (and in a plan saved before fusion:
    :data:`lat_core.contract.saved_plan.FUSE_IF_UNSAVED`)."""
    return plan.fuse is True or (plan.fuse == "auto" and not device_is_cpu)


def job_fuse_key(job: JobRow, measured: bool = False) -> tuple | None:
    """Jobs with equal keys can share one fused process; None: the job runs alone."""
    return fuse_key_or_why(job, measured)[0]


def fuse_key_or_why(job: JobRow, measured: bool = False) -> tuple[tuple | None, str | None]:
    """(the job's fuse key, None) or (None, why it cannot share a fused process with any other).
    Only a job whose command is the trainer on its own job.yaml (one process, no backend options)
    qualifies; its interpreter, mode flag (--resume/--overwrite) and env are part of the key, since
    the group runs with one of each. ``measured`` (plan ``fuse: auto``): only where the committed
    measurement for the job's family and row width says a group wins (lat_core.config.fuse_measured)."""
    argv = list(job.argv)
    if job.world != 1:
        return None, f"it runs {job.world} processes; fused groups are one process"
    if job.backend_options:
        return None, "it has backend options of its own"
    if argv[1:4] != TRAIN_MODULE or len(argv) < 5 or argv[4] != str(Path(job.job_dir) / JOB_YAML) \
            or mode_of(argv[5:]) is None:
        return None, "its command is not the trainer on its own job.yaml"
    try:  # as the trainer will read it: the job's env over its job.yaml
        cfg = parse_config(yaml.safe_load(Path(argv[4]).read_text()), Path(argv[4]), environ=dict(job.env))
    except (ConfigError, OSError, yaml.YAMLError):
        return None, "its config does not load here (the job alone will say why)"
    key = fuse_key(cfg)
    if key is None:
        return None, (refusal(cfg) or "").removeprefix("fuse: ")
    if measured and (why := auto_refusal(cfg)) is not None:
        return None, why
    return (key, argv[0], tuple(argv[5:]), tuple(sorted(job.env.items()))), None


def group_argv(members: list[JobRow], attempts: list[int]) -> list[str]:
    """The fused trainer on the members' folders, each with its own attempt number."""
    first = members[0].argv
    return [first[0], "-m", "lat_core.train.fused", *first[5:], "--attempts", ",".join(map(str, attempts)),
            *(m.job_dir for m in members)]


def smaller_limit(job_dir: JobDir, group_size: int, klass: str) -> GroupLimit:
    """The limit after a group of ``group_size`` ran out of memory: half of it (at least 1), never
    more than the job's limit so far."""
    size = max(1, group_size // 2)
    current = job_dir.read_group_limit()
    if current is not None:
        size = min(size, current.size)
    return GroupLimit(size, f"its fused group of {group_size} ran out of memory ({klass})")
