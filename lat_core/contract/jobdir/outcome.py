"""How an attempt ended, in one line for the job table (its exit, the triage class, the log's last
words) and in the line that closes its train.log."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from lat_core.contract.jobdir.names import TRAIN_LOG
from lat_core.text import shorten, signal_name

# The trainer's exit after it saved a checkpoint on request (SIGUSR1: Slurm's warning before the time
# limit) and stopped before its last step: the engine resubmits it to resume (EX_TEMPFAIL, "try again").
EXIT_SAVED_TO_RESUME = 75
# What a job records when SIGTERM (the engine's cancel) ends it, as a process killed by it exits.
CANCELLED_RC = -15
LAST_LINE_CHARS = 300  # the job row's reason stays one line; triage's diagnosis keeps the full text


def describe_exit(returncode: int | None, job_dir: Path, diagnosis: Any = None) -> str:
    """One line for the job row: how it ended, the triage class (``diagnosis``: a triage
    Diagnosis), and the log's last words (unless triage already names the cause precisely)."""
    what = how_it_ended(returncode, diagnosis)
    precise = diagnosis is not None and diagnosis.cls.info.names_cause
    last = "" if precise else last_log_line(Path(job_dir) / TRAIN_LOG)
    return f"{what}: {last}" if last else what


def how_it_ended(returncode: int | None, diagnosis: Any = None) -> str:
    """``killed by SIGKILL: host_oom: Host out of memory (OOM killer)``: the exit and what triage
    made of it (``diagnosis``: a triage Diagnosis)."""
    if returncode is None:
        what = "the job's runner vanished without an exit record"
    elif returncode < 0:
        what = f"killed by {signal_name(-returncode)}"
    else:
        what = f"exit code {returncode}"
    told = diagnosis.one_line() if diagnosis is not None else ""
    if told and what.lower() not in told.lower():  # "killed: Killed by SIGKILL" would say it twice
        what = f"{what}: {told}"
    return what


def closing_line(verdict: str, how: str, step: int | None, max_steps: int | None, when: float) -> str:
    """The line that ends an attempt in its train.log, so a log never just stops:
    ``[lat] 2026-11-26 02:10:33 cancelled by user at step 120/300: killed by SIGTERM``."""
    at = "" if step is None else f" at step {step}" + (f"/{max_steps}" if max_steps else "")
    return f"[lat] {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(when))} {verdict}{at}: {how}"


def last_log_line(log: Path) -> str:
    """The last non-blank line of a log (its last 4 KiB read), shortened to one row."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return shorten(lines[-1], LAST_LINE_CHARS) if lines else ""
