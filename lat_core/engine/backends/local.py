"""Jobs as detached local processes: own session, stdio in train.log (see :mod:`lat_core.engine.launch`)."""

from __future__ import annotations

from lat_core.engine.launch import Launched, is_same_process, launch, signal_group


class LocalBackend:
    name = "local"

    def __init__(self, launch_fn=launch):
        self._launch = launch_fn

    def launch(self, argv, env, job_dir, exit_path, show_env=()) -> Launched:
        return self._launch(argv, env, job_dir, exit_path, show_env)

    def is_alive(self, pid, pid_start) -> bool:
        return is_same_process(pid, pid_start)

    def signal(self, pid, signum) -> bool:
        return signal_group(pid, signum)
