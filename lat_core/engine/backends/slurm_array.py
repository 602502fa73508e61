"""Pure helpers for submitting several jobs as one Slurm job array (``plan.slurm.array: true``).

One ``sbatch --array=0-(N-1)`` runs one generated script; each task switches on
``$SLURM_ARRAY_TASK_ID``, changes into its own job directory and execs its own runner command.

Environments never reach a file. sbatch's environment (``--export=ALL``) carries every variable
whose value all tasks share unchanged; a variable whose value differs between tasks travels under a
task-prefixed name (``LAT_ARRAY_<i>__<NAME>``) that only that task's branch of the script copies to
``NAME``; a variable that another task has and this one lacks is unset. Each task then unsets all
``LAT_ARRAY_*`` names before the runner starts, so no task sees another's values. The script holds
variable names only, never values.

Each task's Slurm output file is ``<tasks dir>/<i>.log``, a symlink to that job's ``train.log``
(``--open-mode=append``), so what slurmstepd itself writes (a time-limit kill) lands in the job's log
as it does for a single job.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import NamedTuple

from lat_core.contract.jobdir import AttemptFiles

PREFIX = "LAT_ARRAY_"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TaskEnv(NamedTuple):
    exported: dict[str, str]  # task-prefixed name -> value, for sbatch's environment
    copy: tuple[str, ...]  # names this task takes from its prefixed variable
    unset: tuple[str, ...]  # names other tasks have and this task must not inherit


def split_envs(envs: list[dict[str, str]]) -> tuple[dict[str, str], list[TaskEnv]] | None:
    """(shared environment, per-task parts); None when a differing name is no shell variable name."""
    first, *rest = envs
    shared = {k: v for k, v in first.items() if all(e.get(k) == v for e in rest) and not k.startswith(PREFIX)}
    differing = sorted({k for e in envs for k in e} - set(shared))
    if not all(_NAME.match(k) for k in differing):
        return None
    tasks = []
    for i, env in enumerate(envs):
        copy = tuple(k for k in differing if k in env)
        tasks.append(TaskEnv({f"{PREFIX}{i}__{k}": env[k] for k in copy}, copy,
                             tuple(k for k in differing if k not in env)))
    return shared, tasks


def array_script(commands: list[list[str]], job_dirs: list[Path], tasks: list[TaskEnv]) -> str:
    """The batch script: one ``case`` branch per task with its directory, environment and runner."""
    lines = ["#!/bin/bash", "# submitted by lat_core.engine.backends.slurm as a job array; values come from sbatch's "
             "environment", 'case "$SLURM_ARRAY_TASK_ID" in']
    for i, (command, job_dir, task) in enumerate(zip(commands, job_dirs, tasks)):
        lines.append(f"  {i})")
        lines.append(f"    cd {shlex.quote(str(job_dir))} || exit 1")
        lines.extend(f'    export {k}="${{{PREFIX}{i}__{k}}}"' for k in task.copy)
        lines.extend(f"    unset {k}" for k in task.unset)
        lines.append(f"    unset ${{!{PREFIX}@}}")
        lines.append(f"    exec {shlex.join(command)}")
        lines.append("    ;;")
    lines += ['  *) echo "lat: no array task $SLURM_ARRAY_TASK_ID in this script" >&2; exit 2 ;;', "esac", ""]
    return "\n".join(lines)


def task_id(array_job: int | str, index: int) -> str:
    """The id Slurm's commands accept for one task (``123_4``); the journal keeps it as the pid."""
    return f"{array_job}_{index}"


def marker_path(exit_path: Path) -> Path:
    """Next to the attempt's exit record: which array (job name) and task the attempt went into."""
    return AttemptFiles(exit_path).instead_of_exit(".array")


def read_marker(exit_path: Path) -> tuple[str, int] | None:
    try:
        name, index = marker_path(exit_path).read_text().split()
        return name, int(index)
    except (OSError, ValueError):
        return None
