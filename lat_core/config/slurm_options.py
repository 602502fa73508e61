"""``plan.slurm``: the Slurm options a plan may set, checked where the plan is read (front end) and
where a remedy changes one (engine); Slurm's time and memory formats."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lat_core.errors import PlanError

GRES_KINDS = ("gpu", "shard", "auto", "none")
DEFAULT_MAX_JOBS = 32
PACK_LIMIT = 16  # jobs of one warm pack (``slurm.pack``): one allocation of that many jobs' resources
SAVE_BEFORE_END_S = 120  # Slurm's warning before a time limit when the plan sets a ``time``: time to save
SAVE_SIGNAL = "USR1"  # the trainer's "checkpoint at the next step and stop" (lat_core.train.callbacks)
_TIME = re.compile(r"^(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2})$")
_MEM = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_MEM_PARTS = re.compile(r"^(\d+)([KMGT]?)$")


def time_minutes(text: str) -> int:
    """Slurm's time formats (``90``, ``90:30``, ``1:30:00``, ``2-00:00:00``, ``2-12``) in whole
    minutes, a started minute counted."""
    days, _, clock = text.partition("-") if "-" in text else ("0", "", text)
    parts = [int(p) for p in clock.split(":")]
    if "-" in text:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 3:  # HH:MM:SS
        hours, minutes, seconds = parts
    else:  # MM[:SS]
        hours, minutes, seconds = 0, parts[0], (parts + [0])[1]
    return int(days) * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def double_mem(text: str) -> str:
    """Twice a memory size that validate_options accepted (``16G`` -> ``32G``)."""
    return times_mem(text, 2)


def times_mem(text: str, factor: int) -> str:
    """A memory size that validate_options accepted, ``factor`` times (``16G``, 3 -> ``48G``)."""
    match = _MEM_PARTS.match(text.upper())
    if match is None:
        raise ValueError(f"not a Slurm memory size: {text!r}")
    number, unit = match.groups()
    return f"{factor * int(number)}{unit}"


@dataclass(frozen=True)
class SlurmOptions:
    """``plan.slurm``: where and with what resources each job is submitted."""

    partition: str | None = None
    account: str | None = None
    time: str | None = None
    mem: str | None = None
    cpus_per_task: int | None = None
    gres: str = "gpu"
    gpus_per_job: int = 1
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    array: bool = False
    max_jobs: int = DEFAULT_MAX_JOBS  # jobs of the run in Slurm (queued or running) at once
    # nodes each job spans: one torchrun a node (``srun``), its world split evenly over them
    nodes: int = 1
    # seconds before the time limit at which Slurm sends SAVE_SIGNAL to the job (0: never);
    # None: SAVE_BEFORE_END_S (at most half the limit) when ``time`` is set, else never
    save_before_end_s: int | None = None
    # up to this many queued jobs that do not fuse share one Slurm job, which imports the training
    # stack once and forks each (lat_core.train.pack); 1: every job is a Slurm job of its own
    pack: int = 1

    def save_signal_s(self) -> int:
        """Seconds before the end at which the job is asked to save (0: not asked); by default
        SAVE_BEFORE_END_S, at most half of a short time limit (a job is not warned as it starts)."""
        if self.save_before_end_s is not None:
            return self.save_before_end_s
        return min(SAVE_BEFORE_END_S, time_minutes(self.time) * 30) if self.time else 0

    def packed(self, members: int) -> SlurmOptions:
        """These options for one Slurm job holding ``members`` jobs' resources (a warm pack): ``mem``
        and ``cpus_per_task`` times ``members`` (the GPUs are the gres request's)."""
        return dataclasses.replace(self, mem=times_mem(self.mem, members) if self.mem else None,
                                   cpus_per_task=self.cpus_per_task * members if self.cpus_per_task else None)

    def sbatch_args(self, gres_request: str | None) -> list[str]:
        """``gres_request``, ``mem`` and ``cpus_per_task`` are per node (one task a node: its
        torchrun). Every job may get SAVE_SIGNAL: a torchrun job's through lat_core.train.torchrun."""
        spread = (("nodes", self.nodes), ("ntasks-per-node", 1)) if self.nodes > 1 else ()
        args = [f"--{flag}={value}" for flag, value in (
            ("partition", self.partition), ("account", self.account), ("time", self.time), *spread,
            ("mem", self.mem), ("cpus-per-task", self.cpus_per_task), ("gres", gres_request),
        ) if value]
        if self.save_signal_s():  # B: to the batch shell, which execs the runner; it forwards it to the trainer (or LAT's torchrun)
            args.append(f"--signal=B:{SAVE_SIGNAL}@{self.save_signal_s()}")
        return [*args, *self.extra_args]


def validate_options(options: Mapping[str, Any], where: str | None = None) -> SlurmOptions:
    """Check ``plan.slurm``; every problem is named ``plan field 'slurm.<x>'``."""
    problems: list[str] = []
    known = set(SlurmOptions.__dataclass_fields__)
    for key in sorted(set(options) - known):
        problems.append(f"plan field 'slurm.{key}': unknown option (known: {', '.join(sorted(known))})")
    clean = {k: v for k, v in options.items() if k in known and v is not None}
    for key in ("partition", "account"):
        if key in clean and (not isinstance(clean[key], str) or not clean[key].strip()):
            problems.append(f"plan field 'slurm.{key}': expected a non-empty name, got {clean[key]!r}")
    if "time" in clean:
        clean["time"] = str(clean["time"]).strip()
        if not _TIME.match(clean["time"]):
            problems.append(f"plan field 'slurm.time': expected minutes, HH:MM:SS or D-HH:MM:SS, "
                            f"got {options['time']!r}")
    if "mem" in clean:
        clean["mem"] = str(clean["mem"]).strip().upper()
        if not _MEM.match(clean["mem"]) or clean["mem"].rstrip("KMGT") in ("", "0"):
            problems.append(f"plan field 'slurm.mem': expected a size like 16G or 4000M, got {options['mem']!r}")
    for key in ("cpus_per_task", "gpus_per_job", "max_jobs", "nodes"):
        if key in clean and not _whole(clean[key], 1):
            problems.append(f"plan field 'slurm.{key}': expected a whole number >= 1, got {clean[key]!r}")
    if "save_before_end_s" in clean and not _whole(clean["save_before_end_s"], 0):
        problems.append(f"plan field 'slurm.save_before_end_s': expected seconds >= 0 (0: no warning before the "
                        f"time limit), got {clean['save_before_end_s']!r}")
    if "pack" in clean and not (_whole(clean["pack"], 1) and clean["pack"] <= PACK_LIMIT):
        problems.append(f"plan field 'slurm.pack': expected a whole number from 1 to {PACK_LIMIT} (jobs sharing one "
                        f"Slurm job and its one import of the training stack; 1: none), got {clean['pack']!r}")
    elif _whole(clean.get("pack"), 2) and _whole(clean.get("nodes"), 2):
        problems.append(f"plan field 'slurm.pack': a pack runs on one node, but slurm.nodes is {clean['nodes']}: "
                        f"set pack: 1")
    if clean.get("gres", "gpu") not in GRES_KINDS:
        problems.append(f"plan field 'slurm.gres': expected one of {', '.join(GRES_KINDS)}, got {clean['gres']!r}")
    elif clean.get("gres") in ("shard", "auto") and clean.get("gpus_per_job", 1) != 1 and \
            isinstance(clean.get("gpus_per_job"), int):
        problems.append("plan field 'slurm.gpus_per_job': a job on a shard uses one GPU share; "
                        "use gres: gpu for multi-GPU jobs")
    extra = clean.get("extra_args", [])
    if isinstance(extra, str) or not isinstance(extra, (list, tuple)) or \
            not all(isinstance(a, str) and a.startswith("-") for a in extra):
        problems.append(f"plan field 'slurm.extra_args': expected a list of sbatch options like "
                        f"['--qos=high'], got {extra!r}")
    else:
        clean["extra_args"] = tuple(extra)
    if "array" in clean and not isinstance(clean["array"], bool):
        problems.append(f"plan field 'slurm.array': expected true or false (true: the jobs admitted together "
                        f"are one sbatch job array), got {clean['array']!r}")
    elif clean.get("array") is True and _whole(clean.get("nodes"), 2):
        problems.append(f"plan field 'slurm.array': a job array's tasks run on one node each, but slurm.nodes is "
                        f"{clean['nodes']}: set array: false (each multi-node job is then submitted alone)")
    if problems:
        raise PlanError(problems, where=where)
    return SlurmOptions(**clean)


def spread_problem(world: int, nodes: int) -> str | None:
    """Why a job of ``world`` processes cannot spread over ``nodes`` nodes (the same number on each),
    or None when it can."""
    if world % nodes == 0:
        return None
    return (f"plan field 'slurm.nodes': {nodes} nodes need a job's processes (gpus_per_job) to be a multiple "
            f"of {nodes}, the same number on each node; got {world}")


def _whole(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def option_problems(options: object) -> list[str]:
    """The problems of ``plan.slurm`` as lines, for plan validation that gathers every problem."""
    if not isinstance(options, dict):
        return [f"plan field 'slurm': expected a mapping of Slurm options, got {type(options).__name__}"]
    try:
        validate_options(options)
    except PlanError as exc:
        return exc.problems
    return []
