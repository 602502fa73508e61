"""Stopping a bench side's LAT run, so that nothing of it keeps the GPU after the bench exits.

Why: a side's engine and trainers are detached (each in its own session), so a bench killed by
``timeout`` (SIGTERM), Ctrl-C or its own side timeout used to leave them training on the GPU, and the
next call started on a GPU already full. The side is stopped the way a user stops a run: ``lat-tui
cancel --all`` (the engine sends its jobs SIGTERM, SIGKILL 10 s later); what is still alive after a
grace period (an engine that did not answer, a trainer that ignored both) has its process group
killed. The processes are the state directory's own: the engine that holds its lock, every
attempt's runner the journal recorded (pid and start time, so a reused pid is never killed) and any
process whose command line names the state directory (the engine's warm trainers, ``lat warm: DIR``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from lat_core.contract.state_dir import JOURNAL_NAME, LOCK_NAME, EngineLock, open_store, this_host
from lat_core.engine.launch import is_same_process, process_start_time

CANCEL_WAIT_S = 30.0  # `lat-tui cancel --all` waits for the engine's answer at most this long
STOP_GRACE_S = 20.0   # then the jobs have this long to exit (the engine's SIGKILL comes after 10 s)


def side_processes(state_dir: Path) -> list[tuple[int, float | None]]:
    """(pid, start time) of the state directory's engine and of every attempt's runner still alive."""
    found: list[tuple[int, float | None]] = []
    holder = EngineLock(state_dir).holder() if (state_dir / LOCK_NAME).exists() else None
    if holder is not None and holder.host == this_host():
        found.append((holder.pid, process_start_time(holder.pid)))
    if (state_dir / JOURNAL_NAME).exists():
        store = open_store(state_dir)
        for run in store.runs():
            for job in store.jobs(run.id):
                found += [(a.pid, a.pid_start) for a in store.attempts(job.id) if a.pid]
    found += named_processes(state_dir)
    return sorted({(pid, start) for pid, start in found if is_same_process(pid, start)})


def named_processes(state_dir: Path) -> list[tuple[int, float | None]]:
    """Processes whose command line (or title: ``lat engine: DIR``) names the state directory."""
    found = []
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        if proc.pid != os.getpid() and any(str(state_dir) in part for part in proc.info["cmdline"] or []):
            found.append((proc.pid, proc.info["create_time"]))
    return found


def kill_groups(processes: list[tuple[int, float | None]]) -> None:
    """SIGKILL each process's group where it leads one (runners, the engine and its warm trainers
    start new sessions), else the process alone (the headless ``lat-tui --plan`` is in the bench's)."""
    for pid, start in processes:
        if not is_same_process(pid, start):
            continue
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def stop_side(state_dir: Path, headless: subprocess.Popen | None = None, *,
              grace_s: float = STOP_GRACE_S) -> list[int]:
    """Cancels the side's run, waits up to ``grace_s`` for its processes to exit, kills what is left,
    and the headless ``lat-tui --plan`` process too; returns the pids that had to be killed. A second
    SIGTERM or Ctrl-C meanwhile is ignored, so it cannot cut the clean-up short."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    try:
        subprocess.run([sys.executable, "-m", "lat_tui.cli", "cancel", "--all", "--state-dir", str(state_dir)],
                       capture_output=True, text=True, timeout=CANCEL_WAIT_S)
    except subprocess.TimeoutExpired:
        pass  # the engine did not answer: its group is killed below
    deadline = time.monotonic() + grace_s
    while (left := side_processes(state_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    kill_groups(left)
    if headless is not None and headless.poll() is None:
        headless.kill()
        headless.wait()
    return [pid for pid, _ in left]
