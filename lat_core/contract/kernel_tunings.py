"""The kernel-tuning variables and table files, as they cross from a plan or a shell to a job.

Why here: ``LAT_KERNEL_TUNINGS`` and ``LAT_KERNEL_TUNINGS_DIR`` are set in a plan's ``env:`` or the
launching shell and read by the trainer (lat_core.train.tuned_kernels), and a table is written by one
process (``lat-tui warmup --save-tunings``) and read by every later job. The front end refuses a bad
value before anything starts (:func:`problems`, with the words and the table shape the trainer
uses); the trainer reads the same way, defensively (a table that does not read: it autotunes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SWITCH = "LAT_KERNEL_TUNINGS"        # "off": autotune everything, as fla does alone
DIR_VARIABLE = "LAT_KERNEL_TUNINGS_DIR"  # tables of your own GPU models, instead of the shipped ones
VARIABLES = (SWITCH, DIR_VARIABLE)
OFF_WORDS = ("off", "0", "false", "no")
ON_WORDS = ("on", "1", "true", "yes")
TABLE_BYTES = 16 * 1024 * 1024  # a table holds a few hundred configs (the shipped H200 one: 40 KiB)

Kernels = dict[str, list[dict[str, Any]]]  # kernel id -> [{"key": [...], "config": {"kwargs": {...}, ...}}]


class TuningsValueError(ValueError):
    """A kernel-tuning variable whose value cannot be used; names the variable and the value."""

    def __init__(self, name: str, value: str, problem: str):
        self.name, self.value, self.problem = name, value, problem
        super().__init__(f"{name}={value!r}: {problem}")


class TableError(ValueError):
    """A tuning table that is not one; names the file."""


@dataclass(frozen=True)
class KernelTunings:
    """What an environment asks: seed the kernels' autotuners or not, from which folder's tables
    (None: the shipped ones)."""

    enabled: bool
    folder: Path | None = None


def from_env(environ: Mapping[str, str]) -> KernelTunings:
    """The variables' meaning; TuningsValueError for a switch that is neither on nor off, or a
    folder that is not an absolute path (a job runs in its own folder: a relative one would move)."""
    return KernelTunings(_enabled(environ.get(SWITCH, "")), _folder(environ.get(DIR_VARIABLE, "")))


def _enabled(text: str) -> bool:
    word = text.strip().lower()
    if word in OFF_WORDS:
        return False
    if word in ON_WORDS or not word:
        return True
    raise TuningsValueError(SWITCH, text, f"expected off ({', '.join(OFF_WORDS)}: autotune every kernel) "
                                          f"or on ({', '.join(ON_WORDS)}, or unset: use the tables)")


def _folder(text: str) -> Path | None:
    if not text.strip():
        return None
    folder = Path(text.strip()).expanduser()
    if not folder.is_absolute():
        raise TuningsValueError(DIR_VARIABLE, text, "expected an absolute path to a folder of tuning tables "
                                                    "(jobs run in their own folders)")
    return folder


def problems(environ: Mapping[str, str]) -> list[TuningsValueError]:
    """What would keep these variables from working in a job, each naming its variable: a value
    :func:`from_env` refuses, a folder that is missing or not a folder, a table in it that is not one."""
    found: list[TuningsValueError] = []
    try:
        _enabled(environ.get(SWITCH, ""))
    except TuningsValueError as exc:
        found.append(exc)
    try:
        folder = _folder(environ.get(DIR_VARIABLE, ""))
    except TuningsValueError as exc:
        return [*found, exc]
    problem = folder_problem(folder) if folder is not None else None
    return found + ([TuningsValueError(DIR_VARIABLE, environ[DIR_VARIABLE], problem)] if problem else [])


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot hold the jobs' tables, or None. Every ``*.json`` in it is read: which
    one a job takes depends on its GPU model, known only where it runs."""
    if not folder.exists():
        return "no such folder (make it; lat-tui warmup --save-tunings fills it)"
    if not folder.is_dir():
        return "not a folder"
    try:
        tables = sorted(folder.glob("*.json"))
        for table in tables:
            read_table(table)
    except TableError as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None


def read_table(path: Path) -> Kernels:
    """A table's kernels ({} when there is no such file); TableError naming the file for one that
    is unreadable, not JSON or not of the shape :func:`lat_core.train.tuned_kernels.write_table` writes."""
    if not path.is_file():
        return {}
    try:
        if path.stat().st_size > TABLE_BYTES:
            raise TableError(f"{path}: over {TABLE_BYTES // (1024 * 1024)} MiB, not a tuning table")
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TableError(f"{path}: not a tuning table ({exc})") from None
    kernels = data.get("kernels") if isinstance(data, dict) else None
    if not isinstance(kernels, dict):
        raise TableError(f"{path}: not a tuning table (expected a mapping with 'kernels', a mapping of kernels)")
    for name, entries in kernels.items():
        if problem := _entries_problem(entries):
            raise TableError(f"{path}: kernel {name!r}: {problem}")
    return kernels


def _entries_problem(entries: object) -> str | None:
    if not isinstance(entries, list):
        return "expected a list of entries"
    for i, entry in enumerate(entries):
        config = entry.get("config") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), list) or not isinstance(config, dict) \
                or not isinstance(config.get("kwargs"), dict):
            return f"entry {i}: expected a 'key' list and a 'config' mapping with 'kwargs'"
    return None

