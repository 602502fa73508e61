"""Launch a job detached: its own session, stdio appended to ``train.log``, exit record in a file.

The engine records the attempt in the journal before calling :func:`launch`, and afterwards the
runner's pid with its start time (so a reused pid is never mistaken for the job).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from lat_core.runner import write_exit_record
from lat_core.containment import Containment, job_oom_kills, release, stop_tree


@dataclass(frozen=True)
class Launched:
    pid: int
    pid_start: float
    popen: subprocess.Popen | None = None


@dataclass(frozen=True)
class LaunchSpec:
    """One job's launch, for a backend that submits several at once (``launch_many``)."""

    argv: list[str]
    env: dict[str, str]
    job_dir: Path
    exit_path: Path
    show_env: tuple[str, ...] = ()


def launch(argv: list[str], env: dict[str, str], job_dir: Path, exit_path: Path,
           show_env: tuple[str, ...] = ()) -> Launched:
    """Start ``argv`` under the runner, detached, with ``env`` added to the current environment.
    ``show_env`` names the overrides the runner echoes (masked) at the top of the attempt's log."""
    exit_path.parent.mkdir(parents=True, exist_ok=True)
    exit_path.unlink(missing_ok=True)
    Path(f"{exit_path}.pid").unlink(missing_ok=True)
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    runner = [sys.executable, "-m", "lat_core.runner", "--exit-file", str(exit_path),
              "--show-env", ",".join(show_env), "--", *argv]
    with open(job_dir / "train.log", "ab") as log:
        popen = subprocess.Popen(
            runner, cwd=str(job_dir), env=full_env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
        )
    return Launched(popen.pid, process_start_time(popen.pid) or 0.0, popen)


def process_start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def is_same_process(pid: int | None, pid_start: float | None) -> bool:
    """True while the process we launched is alive (pid alive and started at the recorded time)."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():  # start time and state from one read of /proc/<pid>/stat, every tick
            started, status = proc.create_time(), proc.status()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    if status == psutil.STATUS_ZOMBIE:
        return False
    return pid_start is None or abs(started - pid_start) < 1.0


def read_exit_record(exit_path: Path) -> dict | None:
    try:
        return json.loads(exit_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None


def signal_group(pid: int, signum: int = signal.SIGTERM) -> bool:
    """Signal the job's whole process group (runner, trainer, dataloader workers)."""
    try:
        os.killpg(pid, signum)
        return True
    except ProcessLookupError:
        return False


def read_containment(exit_path: Path) -> Containment | None:
    """How the runner contained the attempt (its pid file), None where it wrote none."""
    return Containment.from_json((read_exit_record(Path(f"{exit_path}.pid")) or {}).get("containment"))


def stop_vanished_tree(pid: int, pid_start: float | None, exit_path: Path) -> dict:
    """The runner died without an exit record (killed?): SIGKILL what is left of its job and wait
    until it is gone, so the slot is free for real; then write the exit record in its place (a
    restarted engine reads the same), and say so in the job's log."""
    containment = read_containment(exit_path)
    stopped = stop_tree(containment, pid, pid_start)
    note = f"the job's runner vanished (killed?); its {stopped} remaining processes were stopped"
    record = {"returncode": None, "signal": None, "pid": pid, "started": None, "ended": time.time(),
              "containment": containment.kind if containment else None, "stopped": stopped,
              "oom_kills": job_oom_kills(containment), "vanished": note}
    release(containment)
    write_exit_record(exit_path, record)
    _log_line(exit_path.parent.parent / "train.log", f"[lat] {note}")
    return record


def _log_line(log: Path, line: str) -> None:
    try:
        with open(log, "a") as fh:
            fh.write(line + "\n")
    except OSError:
        pass  # the note is in the exit record and the journal anyway
