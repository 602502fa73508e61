"""CUDA MPS (Multi-Process Service) for the engine's GPUs.

Why: a LoRA job at batch 4 keeps an H100/H200 mostly idle, and without MPS the GPU time-slices
between processes, so several small jobs on one GPU barely add up. Under MPS their kernels run
concurrently. The daemon gets a private pipe directory (under the state directory), so only this
engine's jobs connect to it; other users' processes on the same GPUs are not affected.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lat_core.contract.states import HistoryKind
from lat_core.engine.state import EngineState

CONTROL = "nvidia-cuda-mps-control"


@dataclass(frozen=True)
class MpsDaemon:
    pipe_dir: Path
    log_dir: Path

    def client_env(self) -> dict[str, str]:
        """What a job's environment needs to run as a client of this daemon."""
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}

    def stop(self) -> None:
        """Ask the daemon to quit (it waits for its clients to exit first)."""
        _control(self, "quit", timeout=30)


class RunMps:
    """Each run's private MPS daemon (plan ``mps: true``): started for its first job's launch,
    stopped when the run ends. A part of :class:`lat_core.engine.loop.Engine`."""

    def __init__(self, state: EngineState):
        self.store = state.store
        self._state = state
        self._daemons: dict[int, MpsDaemon | None] = {}  # run id -> its daemon, None where MPS cannot run

    def env(self, run_id: int) -> dict[str, str]:
        """The client env of the run's private MPS daemon, started on first use; where MPS cannot
        run, the history says why and jobs run without it."""
        if not self._state.plan_of(run_id).mps or not self._state.backend(run_id).samples_local_processes:
            return {}
        if run_id not in self._daemons:
            gpus = [d for d in self.store.run(run_id).devices if not d.is_cpu]
            daemon, why = None, "the run has no GPU"
            if gpus:
                base = Path(self.store.path).parent / "mps" / f"run{run_id}"
                daemon, why = start_mps(base, ",".join(d.uuid or str(d.index) for d in gpus))
            self._daemons[run_id] = daemon
            self.store.add_transition(run_id, None, HistoryKind.MPS, why if daemon else f"not used: {why}")
        daemon = self._daemons[run_id]
        return daemon.client_env() if daemon is not None else {}

    def stop(self, run_id: int) -> None:
        """The run ended: its daemon quits (once its clients have exited)."""
        daemon = self._daemons.pop(run_id, None)
        if daemon is not None:
            daemon.stop()


def start_mps(base: Path, visible_devices: str) -> tuple[MpsDaemon | None, str]:
    """Start a private MPS control daemon for ``visible_devices``; (daemon, why) and None when it
    cannot run here (no binary, or the start failed), so callers go on without it."""
    binary = shutil.which(CONTROL)
    if binary is None:
        return None, f"{CONTROL} not found"
    daemon = MpsDaemon(base / "pipe", base / "log")
    if (daemon.pipe_dir / "control").exists() and _answers(daemon):
        return daemon, "already running (adopted)"  # an engine restarted while its jobs ran
    daemon.pipe_dir.mkdir(parents=True, exist_ok=True)
    daemon.log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **daemon.client_env(), "CUDA_VISIBLE_DEVICES": visible_devices}
    try:
        done = subprocess.run([binary, "-d"], env=env, timeout=30, capture_output=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{CONTROL} -d failed: {exc}"
    if done.returncode != 0:
        return None, f"{CONTROL} -d exited {done.returncode}: {done.stderr.decode(errors='replace').strip()}"
    return daemon, "started"


def _answers(daemon: MpsDaemon) -> bool:
    """The control daemon behind ``pipe_dir`` is alive (it lists its servers)."""
    done = _control(daemon, "get_server_list", timeout=5)
    return done is not None and done.returncode == 0


def _control(daemon: MpsDaemon, command: str, *, timeout: float):
    """Send one command to the daemon's control pipe; None when the control binary cannot run."""
    env = {**os.environ, **daemon.client_env()}
    try:
        return subprocess.run([CONTROL], input=f"{command}\n".encode(), env=env, timeout=timeout,
                              capture_output=True)
    except (OSError, subprocess.TimeoutExpired):
        return None
