"""Fused groups on the engine's side (plan ``fuse: auto``): which queued jobs may share one trainer
process (lat_core/train/fused), the group's command, and the file that ties a member's attempt to
the group's process.

A member keeps its own attempt row and exit record (the fused trainer writes it when the member
leaves the group); the group's runner writes the group's own exit record. ``<member exit>.group``
(:class:`GroupRef`) names that record, so reaping, cancel and recovery know, from the job's folder
alone (an engine restart included), that the attempt's process is shared.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from lat_core.config.fuse import fuse_key
from lat_core.config.job import parse_config
from lat_core.errors import ConfigError
from lat_core.job_files import RUNNER_DIR
from lat_core.rows import JobRow

GROUP_SIZE_LIMIT = 8  # members of one group; more rarely pays (issue 17: 8 jobs of a suite)
MATE_SCAN = 256  # queued jobs read after a group's first member to find its mates
TRAIN_MODULE = ["-m", "lat_core.train", "--cfg"]
MODE_FLAGS = ([], ["--resume"], ["--overwrite"])


def fuse_enabled(plan: dict) -> bool:
    """The saved plan's ``fuse`` (lat_core.plan.Plan.fuse): ``auto`` groups jobs, anything else not."""
    return plan.get("fuse") == "auto"


def job_fuse_key(job: JobRow) -> tuple | None:
    """Jobs with equal keys can share one fused process; None: the job runs alone. Only a job whose
    command is the trainer on its own job.yaml (one process, no backend options) qualifies; its
    interpreter, mode flag (--resume/--overwrite) and env are part of the key, since the group
    runs with one of each."""
    argv = list(job.argv)
    if runs_alone(Path(job.job_dir)):
        return None
    if job.world != 1 or job.backend_options or argv[1:4] != TRAIN_MODULE or len(argv) < 5:
        return None
    if argv[4] != str(Path(job.job_dir) / "job.yaml") or argv[5:] not in MODE_FLAGS:
        return None
    try:  # as the trainer will read it: the job's env over its job.yaml
        key = fuse_key(parse_config(yaml.safe_load(Path(argv[4]).read_text()), Path(argv[4]), environ=dict(job.env)))
    except (ConfigError, OSError, yaml.YAMLError):
        return None  # the job alone will say what is wrong with its config
    return None if key is None else (key, argv[0], tuple(argv[5:]), tuple(sorted(job.env.items())))


def group_argv(members: list[JobRow], attempts: list[int]) -> list[str]:
    """The fused trainer on the members' folders, each with its own attempt number."""
    first = members[0].argv
    return [first[0], "-m", "lat_core.train.fused", *first[5:], "--attempts", ",".join(map(str, attempts)),
            *(m.job_dir for m in members)]


def group_exit_path(leader: JobRow, attempt: int) -> Path:
    """The group runner's exit record, in its first member's folder (whose train.log gets the
    group's own output lines besides that member's)."""
    return Path(leader.job_dir) / RUNNER_DIR / f"group-attempt-{attempt}.exit.json"


@dataclass(frozen=True)
class GroupRef:
    """Beside a member's exit record: the group's runner exit record and the group's job ids."""
    exit_path: str
    job_ids: tuple[int, ...]

    def to_json(self) -> dict:
        return {"exit_path": self.exit_path, "job_ids": list(self.job_ids)}

    @classmethod
    def from_json(cls, raw) -> "GroupRef | None":
        if not isinstance(raw, dict) or not isinstance(raw.get("exit_path"), str):
            return None
        ids = raw.get("job_ids")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return None
        return cls(raw["exit_path"], tuple(ids))


def group_ref_path(member_exit: Path) -> Path:
    return Path(f"{member_exit}.group")


def write_group_ref(member_exit: Path, ref: GroupRef) -> None:
    path = group_ref_path(member_exit)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(ref.to_json()))
    tmp.replace(path)


def read_group_ref(member_exit: Path) -> GroupRef | None:
    """None for an attempt of its own (no file) or an unreadable file (then it is treated as one)."""
    try:
        return GroupRef.from_json(json.loads(group_ref_path(member_exit).read_text()))
    except (OSError, ValueError):
        return None


def runs_alone_path(job_dir: Path) -> Path:
    return Path(job_dir) / RUNNER_DIR / "fuse-alone"


def runs_alone(job_dir: Path) -> bool:
    """The engine took this job out of fusion (its group ran out of memory): it runs alone from now on."""
    return runs_alone_path(job_dir).is_file()


def set_runs_alone(job_dir: Path, why: str) -> None:
    path = runs_alone_path(job_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(why + "\n")
