"""What a job is called on screen and in ``ps``: one name for the job tables and the process titles.

Every trainer would otherwise show as ``python -m lat_core.train.warm --socket ...`` (a warm-started
job is a fork of the preload process), and a fused group would name none of its members. Each LAT
process titles itself instead (``setproctitle``, which ``ps``, ``top`` and nvitop read from
/proc/PID/cmdline; without it, only the 15-byte kernel name via ``prctl(PR_SET_NAME)``):

    lat: gla/lora_r8 87:glue-tvt_sst2                  a trainer
    lat group(4): gla/lora_r{4,8,16,32} 87:sst2        a fused group (members' common parts once)
    lat runner: gla/lora_r8 87:glue-tvt_sst2           the runner that waits for a trainer
    lat warm: ~/.local/state/lat/warm/sock              the warm-start process (its socket)
    lat engine: ~/.local/state/lat                     the engine

Torch-free and cheap: the runner and the engine import it too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Protocol

from lat_core.contract.jobdir.names import JOB_YAML  # the names only: the runner imports this module

MAX_TITLE = 160  # a title stays one readable line in `ps` and nvitop
PR_SET_NAME = 15  # linux/prctl.h
KERNEL_NAME_BYTES = 15  # the kernel keeps 16 bytes, the last one NUL


def display_name(family: str | None, stem: str, seed: int | str, dataset: str) -> str:
    """``gla/lora_r8 87:glue-tvt_sst2``: model family, config, seed and dataset (as the tables show it)."""
    model = f"{family}/" if family else ""
    return f"{model}{stem} {seed}:{dataset}"


class JournalJob(Protocol):
    """What names a job in the journal (a JobSummary or JobRow of lat_core.contract.rows)."""

    @property
    def family(self) -> str | None: ...
    @property
    def stem(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def dataset(self) -> str: ...


def job_title(job: JournalJob) -> str:
    """A journal job's one name, the tables' (``display_name``): what notices, the engine's answers
    and reports call it, never its folder key (``tiny-sst2_seed1/lora_r8``)."""
    return display_name(job.family, job.stem, job.seed, job.dataset)


def set_title(title: str) -> None:
    """Title this process (its command line, as ``ps`` and nvitop show it) and give it a kernel name
    without spaces; never fails a job for want of a title."""
    if len(title) > MAX_TITLE:
        title = title[: MAX_TITLE - 1] + "…"
    try:
        from setproctitle import setproctitle
    except ImportError:
        pass
    else:
        setproctitle(title)   # it sets the kernel name to the title's head too: replaced below
    _set_kernel_name(kernel_name(title))


def kernel_name(title: str) -> str:
    """``lat``, ``lat-runner``, ``lat-group-4``, ...: the title's kind in letters, digits and dashes.
    Tools read /proc/PID/stat's name as one word: Slurm's proctrack/linuxproc lost every process
    named with a space (``lat runner: ...``) from its job, so scancel never reached the runner."""
    kind = re.sub(r"[^a-z0-9]+", "-", title.split(":", 1)[0].lower()).strip("-")
    return (kind or "lat")[:KERNEL_NAME_BYTES]


def _set_kernel_name(name: str) -> None:
    """/proc/PID/comm (what ``top`` and ``ps -o comm`` show), 15 bytes at most."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:KERNEL_NAME_BYTES]), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the process keeps its name


# ---------------------------------------------------------------- names read from job folders
def job_label(job_yaml: str | Path) -> str:
    """The display name of the job whose config is ``job_yaml``; its folder's name when the file
    cannot say (missing, unreadable, or without name, seed and data)."""
    path = Path(job_yaml)
    raw = _read_yaml(path)
    name = raw.get("name") or (path.parent.name if path.stem == "job" else path.stem)
    dataset = raw.get("data")
    if isinstance(dataset, dict):   # a dataset named by its columns (lat_core.config.user_data)
        dataset = dataset.get("name")
    if not isinstance(dataset, str):
        return path.parent.name or str(path)
    model = raw.get("model")
    family = model.get("family") if isinstance(model, dict) else None
    return display_name(str(family) if family else None, str(name), raw.get("seed", 1), dataset)


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def group_label(job_dirs: list[str] | list[Path]) -> str:
    """``group(4): gla/lora_r{4,8,16,32} 87:sst2``: the members' names with what they share said once."""
    names = [job_label(Path(d) / JOB_YAML) for d in job_dirs]
    return f"group({len(names)}): {compact_names(names)}"


def compact_names(names: list[str]) -> str:
    """Names that share a prefix and a suffix (``seed:dataset``, mostly) as ``prefix{a,b,c}suffix``;
    when that is too long for a title, ``prefix{a..c}suffix`` (the first and the last member)."""
    if len(set(names)) < 2:  # one member, or one name for all
        return names[0] if names else ""
    prefix, suffix = _common_prefix(names), _common_suffix(names)
    cut = min(len(n) for n in names) - len(suffix)
    prefix = prefix[: max(min(len(prefix), cut), 0)]
    parts = [n[len(prefix): len(n) - len(suffix)] for n in names]
    listed = f"{prefix}{{{','.join(parts)}}}{suffix}"
    return listed if len(listed) <= MAX_TITLE // 2 else f"{prefix}{{{parts[0]}..{parts[-1]}}}{suffix}"


def _common_prefix(names: list[str]) -> str:
    """The shared start, cut back to just after a separator so no word is split (``lora_`` of
    ``lora_r4``/``lora_r8``, not ``lora_r``)."""
    shared = os.path.commonprefix(names)
    if all(len(n) == len(shared) or not n[len(shared)].isalnum() for n in names):
        return shared
    cut = max((i + 1 for i, ch in enumerate(shared) if not ch.isalnum()), default=0)
    return shared[:cut]


def _common_suffix(names: list[str]) -> str:
    """The shared end, by the same rule (`` 87:sst2``, or ``:sst2`` where the seeds differ)."""
    return _common_prefix([n[::-1] for n in names])[::-1]


def command_label(command: list[str]) -> str | None:
    """The label of a trainer command as the engine launches it (``python -m lat_core.train --cfg
    F`` or ``python -m lat_core.train.fused ... DIR...``); None for any other command."""
    if "-m" not in command[:-1]:
        return None
    at = command.index("-m")
    module, args = command[at + 1], command[at + 2:]
    if module == "lat_core.train" and "--cfg" in args[:-1]:
        return job_label(args[args.index("--cfg") + 1])
    if module == "lat_core.train.fused":
        return group_label(_fused_job_dirs(args))
    return None


def _fused_job_dirs(args: list[str]) -> list[str]:
    """The positional job folders of a fused command (its only options that take a value are
    ``--attempt`` and ``--attempts``)."""
    dirs, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--attempt", "--attempts"):
            skip = True
        elif not arg.startswith("-"):
            dirs.append(arg)
    return dirs


def runner_title(exit_file: str, command: list[str]) -> str:
    """``lat runner: NAME``: the job (or group) its trainer runs; the job folder's own name when
    the command is not a trainer's."""
    label = command_label(command)
    if label is None:
        job_dir = Path(exit_file).resolve().parent.parent  # JOB_DIR/.lat/attempt-N.exit.json
        label = job_label(job_dir / JOB_YAML)
    return f"lat runner: {label}"
