"""Where jobs run. A backend launches a job under :mod:`lat_core.runner` (which writes the exit
record into the job directory on a filesystem the engine sees), tells whether a launched job is
still alive, and signals it; what else it can do, it declares in capability flags
(:class:`~lat_core.engine.backends.base.Backend`). ``local`` is the default; ``slurm`` submits
through sbatch."""

from __future__ import annotations

from lat_core.engine.backends.base import Backend

__all__ = ["Backend", "get_backend"]


def get_backend(name: str, **options) -> Backend:
    if name == "local":
        from lat_core.engine.backends.local import LocalBackend

        return LocalBackend()
    if name == "slurm":
        from lat_core.engine.backends.slurm import SlurmBackend

        return SlurmBackend(**options)
    raise ValueError(f"unknown backend {name!r} (choose local or slurm)")
