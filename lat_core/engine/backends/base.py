"""The backend contract: what every backend does, and the capabilities only some have.

The engine asks a backend's capability flags, never its name or whether it happens to have a
method, so a new backend says in one place what the engine may expect of it.
"""

from __future__ import annotations

from pathlib import Path

from lat_core.contract.jobdir import ExitRecord
from lat_core.engine.launch import Launched, LaunchSpec


class Backend:
    name: str = ""
    # Job pids are processes on this host: sample their memory, read their cgroup's OOM counter,
    # measure devices' free memory for admission, and share this host's MPS daemon.
    samples_local_processes: bool = False
    # Jobs may fork from the engine's preloaded process (lat_core.engine.warm).
    supports_warm_start: bool = False
    # After an engine crash, the scheduler's queue (``recover``) says whether a launch happened;
    # otherwise the runner's pid file does.
    recovers_from_queue: bool = False
    # ``diagnose`` gives the scheduler's own verdict on a failed job (time limit, node, ...).
    diagnoses_failures: bool = False
    # ``stop_vanished`` stops the tree of a job whose runner died, and the end of a job ends its tree.
    reaps_process_tree: bool = False
    # A fused group (lat_core.train.fused) goes out as one launch: one process for its members, on a
    # job folder the engine reads (their exit records, cancel markers and the group's own record).
    runs_fused_groups: bool = False

    @property
    def nodes_per_job(self) -> int:
        """Nodes each multi-process job spans (a Slurm plan's ``slurm.nodes``): one torchrun a node."""
        return 1

    @property
    def pack_size(self) -> int:
        """The most jobs that do not fuse one launch may hold as a warm pack (lat_core.train.pack: a
        Slurm plan's ``slurm.pack``); 1: none."""
        return 1

    @property
    def submits_arrays(self) -> bool:
        """The jobs of one admission pass go to ``launch_many`` in one call (a Slurm plan's choice)."""
        return False

    def launch(self, argv: list[str], env: dict[str, str], job_dir, exit_path,
               show_env: tuple[str, ...] = (), *, world: int = 1, pack: int = 1) -> Launched:
        """``world``: the job's processes, for a scheduler that allocates its GPUs; ``pack``: the
        launch is a warm pack of that many jobs (:attr:`pack_size`), asking that many jobs' resources."""
        raise NotImplementedError

    def is_alive(self, pid: int | None, pid_start: float | None) -> bool:
        raise NotImplementedError

    def why_cold(self) -> str | None:
        """Why no job forks from the engine's preloaded process (lat_core.engine.warm) on this
        backend, said once in a run's history; None where :attr:`supports_warm_start`."""
        return None if self.supports_warm_start else f"the {self.name} backend starts every job in a fresh process"

    def warm_history(self) -> str:
        """The run's history line (a ``warm_start`` transition) for a backend whose jobs never fork
        from the engine's preloaded process (:meth:`why_cold` not None), said once."""
        return f"not used: {self.why_cold()}"

    def fused_launch_note(self, pid: int | str) -> str:
        """What the history's line for a fused group's start adds about its launch ``pid`` (a
        scheduler's job id); "" for nothing."""
        return ""

    def signal(self, pid: int, signum: int) -> bool:
        raise NotImplementedError

    def launch_many(self, specs: list[LaunchSpec]) -> list[Launched | OSError]:
        """Only where :attr:`submits_arrays`."""
        raise NotImplementedError(f"the {self.name} backend does not submit arrays")

    def recover(self, exit_path: Path, since: float | None) -> Launched | None:
        """Only where :attr:`recovers_from_queue`."""
        raise NotImplementedError(f"the {self.name} backend does not recover from a queue")

    def diagnose(self, pid):
        """Only where :attr:`diagnoses_failures`: a triage Diagnosis, or None."""
        raise NotImplementedError(f"the {self.name} backend does not diagnose failures")

    def with_options(self, overrides: dict) -> Backend:
        """Only where a job may carry its own options (a remedy's Slurm ``time`` or ``mem``): this
        backend with ``overrides`` for one job."""
        raise NotImplementedError(f"the {self.name} backend takes no per-job options")

    def stop_vanished(self, pid: int, pid_start: float | None, exit_path: Path) -> ExitRecord | None:
        """Only where :attr:`reaps_process_tree`: the runner ``pid`` is gone without an exit record;
        stop what is left of its job and return the exit record written for it."""
        return None
