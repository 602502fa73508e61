"""Launch a job detached: its own session, stdio appended to ``train.log``, exit record in a file.

The engine records the attempt in the journal before calling :func:`launch`, and afterwards the
runner's pid with its start time (so a reused pid is never mistaken for the job).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from lat_core.contract.jobdir import AttemptFiles, ExitRecord
from lat_core.containment import Containment, job_oom_kills, release, stop_tree
from lat_core.engine.faults import disk_full
from lat_core.errors import OutputPathError
from lat_core.process_start import same_start
from lat_core.contract.jobdir.names import TRAIN_LOG
from lat_core.safe_files import job_folder_of, open_append


@dataclass(frozen=True)
class Launched:
    pid: int | str  # the runner's process id; for Slurm its job id, or an array task's "123_4"
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
    world: int = 1  # processes of the job (GPUs a scheduler allocates it)


def launch(argv: list[str], env: dict[str, str], job_dir: Path, exit_path: Path,
           show_env: tuple[str, ...] = ()) -> Launched:
    """Start ``argv`` under the runner, detached, with ``env`` added to the current environment.
    ``show_env`` names the overrides the runner echoes (masked) at the top of the attempt's log.
    The runner creates the exit record's folder: a directory made here cost the engine, which
    launches every job, as much as the fork of the runner."""
    AttemptFiles(exit_path).clear_runner_files(job_dir)
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    runner = [sys.executable, "-m", "lat_core.runner", "--exit-file", str(exit_path),
              "--show-env", ",".join(show_env), "--", *argv]
    with os.fdopen(open_append(job_dir / TRAIN_LOG, job_dir=job_dir), "ab") as log:  # never through a symlink
        popen = subprocess.Popen(
            runner, cwd=str(job_dir), env=full_env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
        )
    return Launched(popen.pid, process_start_time(popen.pid) or 0.0, popen)


def process_start_time(pid: int) -> float | None:
    found = _state_and_start(pid)
    return found[1] if found else None


def is_same_process(pid: int | None, pid_start: float | None) -> bool:
    """True while the process we launched is alive (pid alive and started at the recorded time)."""
    if not pid:
        return False
    found = _state_and_start(pid)
    if found is None or found[0] == psutil.STATUS_ZOMBIE:
        return False
    return pid_start is None or same_start(pid_start, found[1])


def _state_and_start(pid: int) -> tuple[str, float] | None:
    """(psutil's status name, start time as psutil's ``create_time``) of a process, None when it is
    gone or not ours to see. Every launch and every running job's liveness check asks this: one
    read of ``/proc/<pid>/stat`` where there is a /proc (psutil's Process costs several reads,
    /proc/stat's whole boot-time table among them, each time), else psutil."""
    if not _HAS_PROC:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                return proc.status(), proc.create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # "pid (comm) state ppid ... starttime(22nd) ...": comm may hold spaces and parentheses
    fields = stat[stat.rfind(b")") + 2:].split()
    state = fields[0].decode()
    return _STATUS.get(state, state), int(fields[19]) / _CLOCK_TICKS + _boot_time()


_HAS_PROC = os.path.exists("/proc/self/stat")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if _HAS_PROC else 100
_STATUS = {"Z": psutil.STATUS_ZOMBIE, "R": psutil.STATUS_RUNNING, "S": psutil.STATUS_SLEEPING}
_BOOT_TIME_TTL_S = 1.0
_boot_time_read: list[float] = [0.0, -_BOOT_TIME_TTL_S]  # [value, monotonic time read]


def _boot_time() -> float:
    """psutil's boot time (``btime`` of /proc/stat, which moves when the wall clock is stepped), read
    again after a second: start times computed here match psutil's, which the runner records."""
    value, read_at = _boot_time_read
    now = time.monotonic()
    if now - read_at >= _BOOT_TIME_TTL_S:
        value = _boot_time_read[0] = psutil.boot_time()
        _boot_time_read[1] = now
    return value


def signal_group(pid: int, signum: int = signal.SIGTERM) -> bool:
    """Signal the job's whole process group (runner, trainer, dataloader workers)."""
    try:
        os.killpg(pid, signum)
        return True
    except ProcessLookupError:
        return False


def read_containment(exit_path: Path) -> Containment | None:
    """How the runner contained the attempt (its pid file), None where it wrote none."""
    record = AttemptFiles(exit_path).read_pid()
    return Containment.from_json(record.containment) if record is not None else None


def stop_vanished_tree(pid: int, pid_start: float | None, exit_path: Path) -> ExitRecord:
    """The runner died without an exit record (killed?): SIGKILL what is left of its job and wait
    until it is gone, so the slot is free for real; then write the exit record in its place (a
    restarted engine reads the same), and say so in the job's log."""
    containment = read_containment(exit_path)
    stopped = stop_tree(containment, pid, pid_start)
    note = f"the job's runner vanished (killed?); its {stopped} remaining processes were stopped"
    record = ExitRecord(None, pid=pid, ended=time.time(), containment=containment.kind if containment else None,
                        stopped=stopped, oom_kills=job_oom_kills(containment), why=note)
    release(containment)
    try:
        AttemptFiles(exit_path).write_exit(record)  # its folder made if the runner died before making it
        _log_line(job_folder_of(exit_path) / TRAIN_LOG, f"[lat] {note}")
    except (OSError, OutputPathError) as exc:  # a planted symlink: the attempt ends without a record, as failed
        if disk_full(exc):
            raise   # the engine fails this job as "disk full" and pauses its run (engine/faults.py)
        print(f"[lat] cannot write {exit_path}: {exc}", file=sys.stderr, flush=True)
    return record


def _log_line(log: Path, line: str) -> None:
    try:
        with os.fdopen(open_append(log), "a") as fh:
            fh.write(line + "\n")
    except (OSError, OutputPathError):
        pass  # the note is in the exit record and the journal anyway
