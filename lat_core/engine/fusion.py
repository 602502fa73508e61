"""Fused groups on the engine's side (plan ``fuse``, ``auto`` by default): which queued jobs may share one trainer
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
from lat_core.contract.job_files import RUNNER_DIR, write_json_file
from lat_core.contract.rows import JobRow
from lat_core.contract.saved_plan import SavedPlan

GROUP_SIZE_LIMIT = 8  # members of one group; more rarely pays (issue 17: 8 jobs of a suite)
MATE_SCAN = 256  # queued jobs read after a group's first member to find its mates
TRAIN_MODULE = ["-m", "lat_core.train", "--cfg"]
MODE_FLAGS: tuple[list[str], ...] = ([], ["--resume"], ["--overwrite"])


def fuses_on(plan: SavedPlan, device_is_cpu: bool) -> bool:
    """Whether the saved plan's ``fuse`` (lat_core.front.plan.Plan.fuse) groups jobs on such a device:
    ``auto`` on GPUs, ``true`` everywhere, ``false`` nowhere (and in a plan saved before fusion:
    :data:`lat_core.contract.saved_plan.FUSE_IF_UNSAVED`)."""
    return plan.fuse is True or (plan.fuse == "auto" and not device_is_cpu)


def job_fuse_key(job: JobRow) -> tuple | None:
    """Jobs with equal keys can share one fused process; None: the job runs alone. Only a job whose
    command is the trainer on its own job.yaml (one process, no backend options) qualifies; its
    interpreter, mode flag (--resume/--overwrite) and env are part of the key, since the group
    runs with one of each."""
    argv = list(job.argv)
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


def group_id(ref: GroupRef) -> str:
    """The journal's name of a group: its first member's job id and attempt number (``12.1``),
    from the group's exit record (group_exit_path), so an engine that finds the ref alone names it the same."""
    attempt = Path(ref.exit_path).name.removeprefix("group-attempt-").removesuffix(".exit.json")
    return f"{ref.job_ids[0]}.{attempt}"


def group_ref_path(member_exit: Path) -> Path:
    return Path(f"{member_exit}.group")


def write_group_ref(member_exit: Path, ref: GroupRef) -> None:
    write_json_file(group_ref_path(member_exit), ref.to_json())


def read_group_ref(member_exit: Path) -> GroupRef | None:
    """None for an attempt of its own (no file) or an unreadable file (then it is treated as one)."""
    try:
        return GroupRef.from_json(json.loads(group_ref_path(member_exit).read_text()))
    except (OSError, ValueError):
        return None


def runner_exit_path(attempt_exit: Path) -> Path:
    """Where the runner that runs an attempt keeps its pid and exit records: the attempt's own
    exit path, or a fused member's group's (a member has no runner of its own)."""
    ref = read_group_ref(attempt_exit)
    return Path(ref.exit_path) if ref is not None else attempt_exit


@dataclass(frozen=True)
class GroupLimit:
    """The most members a job's fused groups may have from now on, and why: a group it was in ran
    out of memory (issue 17: retried as smaller groups). ``size`` 1: the job runs alone."""
    size: int
    why: str

    def to_json(self) -> dict:
        return {"size": self.size, "why": self.why}

    @classmethod
    def from_json(cls, raw) -> "GroupLimit | None":
        if not isinstance(raw, dict) or not isinstance(raw.get("why"), str):
            return None
        size = raw.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            return None
        return cls(size, raw["why"])


def group_limit_path(job_dir: Path) -> Path:
    return Path(job_dir) / RUNNER_DIR / "fuse-limit.json"


def old_runs_alone_path(job_dir: Path) -> Path:
    """An older engine's mark (one line, why): the job runs alone; read as a limit of 1."""
    return Path(job_dir) / RUNNER_DIR / "fuse-alone"


def read_group_limit(job_dir: Path) -> GroupLimit | None:
    """The job's limit; None: no limit (no file). A file that cannot be read or parsed (a crash
    half-way, a hand edit) and an older engine's mark both read as running alone: the safe side
    for a job whose group ran out of memory, and never an engine error."""
    path = group_limit_path(job_dir)
    try:
        text = path.read_text()
    except FileNotFoundError:
        try:
            why = old_runs_alone_path(job_dir).read_text().strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            why = f"unreadable ({type(exc).__name__})"
        return GroupLimit(1, why or "an older engine's mark")
    except (OSError, UnicodeDecodeError) as exc:
        return GroupLimit(1, f"{path} could not be read ({type(exc).__name__}): runs alone")
    try:
        limit = GroupLimit.from_json(json.loads(text))
    except ValueError:
        limit = None
    return limit or GroupLimit(1, f"{path} is not a group limit: runs alone")


def write_group_limit(job_dir: Path, limit: GroupLimit) -> None:
    write_json_file(group_limit_path(job_dir), limit.to_json())


def smaller_limit(job_dir: Path, group_size: int, klass: str) -> GroupLimit:
    """The limit after a group of ``group_size`` ran out of memory: half of it (at least 1), never
    more than the job's limit so far."""
    size = max(1, group_size // 2)
    current = read_group_limit(job_dir)
    if current is not None:
        size = min(size, current.size)
    return GroupLimit(size, f"its fused group of {group_size} ran out of memory ({klass})")
