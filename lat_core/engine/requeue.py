"""How a requeued job's trainer starts its new attempt.

A succeeded job's folder holds a finished run, which the trainer refuses to train over without
``--overwrite``; a failed or cancelled job can continue from its checkpoints (``--resume``) or
start over (``--overwrite``, which also clears the old checkpoints and events). The front end
chooses (``lat-tui requeue N --resume | --fresh``); the default for a succeeded job is a fresh
attempt, for the others the job's own command as planned. ``lat-tui requeue --failed`` requeues
a run's failed and cancelled jobs with one answer: each resumes where it left a checkpoint, else
starts fresh, unless ``--fresh`` (:meth:`lat_core.contract.jobdir.JobDir.requeue_start`).
"""

from __future__ import annotations

from pathlib import Path

from lat_core.contract.jobdir import JobDir

START_FLAGS = ("--resume", "--overwrite")
STARTS = {"resume": "--resume", "fresh": "--overwrite"}


def restart_argv(argv: list[str], succeeded: bool, start: str | None) -> list[str]:
    """``argv`` with the start flag for the new attempt; ValueError for an unknown ``start``."""
    if start is not None and start not in STARTS:
        raise ValueError(f"unknown requeue start {start!r} (expected one of {', '.join(STARTS)})")
    if start is None and not succeeded:
        return list(argv)
    flag = STARTS[start or "fresh"]
    return [a for a in argv if a not in START_FLAGS] + [flag]


def start_said(argv: list[str], job_dir: str | Path) -> str:
    """How the attempt that ``argv`` launches starts, for the job's history: ``resume from
    checkpoint-240``, ``fresh``, or ``as first launched`` (the planned command, no start flag)."""
    if "--resume" in argv:
        found = JobDir(job_dir).resumable_checkpoints()
        return f"resume from {found[-1][1].name}" if found else "resume (no checkpoint found)"
    return "fresh" if "--overwrite" in argv else "as first launched"


def waiting_step(argv: list[str], job_dir: str | Path) -> int | None:
    """The step a requeued job's row shows while it waits: the checkpoint its ``--resume``
    continues from; none for a start from scratch, where the last attempt's step and loss would
    read as progress it no longer has."""
    if "--resume" not in argv:
        return None
    found = JobDir(job_dir).latest_checkpoint()
    return found[0] if found else None
