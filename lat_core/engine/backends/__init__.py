"""Where jobs run. A backend launches a job under :mod:`lat_core.runner` (which writes the exit
record into the job directory on a filesystem the engine sees), tells whether a launched job is
still alive, and signals it. ``local`` is the default; ``slurm`` submits through sbatch."""

from __future__ import annotations

from typing import Protocol

from lat_core.engine.launch import Launched


class Backend(Protocol):
    name: str

    def launch(self, argv: list[str], env: dict[str, str], job_dir, exit_path, show_env: tuple[str, ...] = ()) -> Launched:
        ...

    def is_alive(self, pid: int | None, pid_start: float | None) -> bool:
        ...

    def signal(self, pid: int, signum: int) -> bool:
        ...


def get_backend(name: str, **options) -> Backend:
    if name == "local":
        from lat_core.engine.backends.local import LocalBackend

        return LocalBackend()
    if name == "slurm":
        from lat_core.engine.backends.slurm import SlurmBackend

        return SlurmBackend(**options)
    raise ValueError(f"unknown backend {name!r} (choose local or slurm)")
