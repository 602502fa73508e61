"""Warm packs on Slurm (plan ``slurm.pack: K``, with ``warm_start`` on): up to K queued jobs that do
not fuse go out as one Slurm job asking K jobs' resources, whose process imports the training stack
once and forks each job's trainer on its own GPUs (:mod:`lat_core.train.pack`).

From the engine's side a pack is a fused group (:mod:`lat_core.engine.groups`): one launch, one
slot, each member's own attempt row, exit record and ``GroupRef`` (``pack: true``), cancel through
its cancel marker, Slurm's word on the pack's job for the members still in it, adoption by the
pack's name. This module says which jobs may share a pack and the pack's command.
"""
from __future__ import annotations

from pathlib import Path

from lat_core.contract.jobdir.names import JOB_YAML
from lat_core.contract.rows import JobRow
from lat_core.contract.trainer_modes import mode_of
from lat_core.engine.fusion import TRAIN_MODULE

PACK_MODULE = "lat_core.train.pack"


def pack_key(job: JobRow) -> tuple | None:
    """Jobs with equal keys may share a pack: the trainer on its own job.yaml, one process, no
    backend options of its own (a remedy's ``time`` or ``mem``: its Slurm job differs), the same
    interpreter, environment and suite (the pack's process is started with one of each). None:
    the job goes to Slurm alone."""
    argv = list(job.argv)
    if job.world != 1 or job.backend_options or len(argv) < 5 or argv[1:4] != TRAIN_MODULE \
            or argv[4] != str(Path(job.job_dir) / JOB_YAML) or mode_of(argv[5:]) is None:
        return None
    return argv[0], job.suite, tuple(sorted(job.env.items()))


def pack_argv(members: list[JobRow], attempts: list[int]) -> list[str]:
    """The pack runner on the members' folders: each with its job id, attempt number and mode."""
    modes = [str(mode_of(m.argv[5:])) for m in members]
    return [members[0].argv[0], "-m", PACK_MODULE, "--job-ids", ",".join(str(m.id) for m in members),
            "--attempts", ",".join(map(str, attempts)), "--modes", ",".join(modes),
            *(m.job_dir for m in members)]
