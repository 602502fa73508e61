"""Jobs as detached local processes: own session, stdio in train.log (see :mod:`lat_core.engine.launch`),
each job's process tree contained by its runner (:mod:`lat_core.containment`)."""

from __future__ import annotations

from pathlib import Path

from lat_core.contract.jobdir import ExitRecord
from lat_core.engine.backends.base import Backend
from lat_core.engine.launch import Launched, is_same_process, launch, signal_group, stop_vanished_tree


class LocalBackend(Backend):
    name = "local"
    samples_local_processes = True
    supports_warm_start = True
    reaps_process_tree = True
    runs_fused_groups = True

    def __init__(self, launch_fn=launch):
        self._launch = launch_fn

    def launch(self, argv, env, job_dir, exit_path, show_env=(), *, world=1, pack=1) -> Launched:
        return self._launch(argv, env, job_dir, exit_path, show_env)  # the devices' env pins its GPUs

    def is_alive(self, pid, pid_start) -> bool:
        return is_same_process(pid, pid_start)

    def signal(self, pid, signum) -> bool:
        return signal_group(pid, signum)

    def stop_vanished(self, pid, pid_start, exit_path) -> ExitRecord | None:
        return stop_vanished_tree(pid, pid_start, Path(exit_path))
