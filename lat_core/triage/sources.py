"""Read what a job left behind: the log's tail, its events, its config and its exit record.

Everything here is best effort: a job that died hard may have left a torn events line, no exit
record or no config, and triage must still say as much as the remaining files allow.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from lat_core.contract.jobdir import AnyEvent, Event, JobDir
from lat_core.contract.jobdir.names import COMMAND
from lat_core.contract.jobdir.records import ExitRecord, PeakUsage
from lat_core.errors import LatError

E = TypeVar("E", bound=Event)

#: Only the end of a log decides a death; reading 256 KiB keeps triage fast on multi-GB logs.
TAIL_BYTES = 256 * 1024
#: The events that matter (the last memory, failed, finished and checkpoint events) are near the end.
EVENTS_TAIL_BYTES = 4 * 2**20
#: A job.yaml, command.json or exit record larger than this is no file LAT wrote: read as empty.
MAPPING_BYTES = 2**20


class TriageError(LatError):
    """A path triage cannot read at all (a pipe, a socket, a log it may not open)."""

    title = "Cannot triage"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

#: A job's config as its job.yaml holds it, read without the schema (a job may have died of a bad
#: one): every value is checked where a rule uses it.
RawConfig = Mapping[str, object]
#: A job's environment: the journal's, or command.json's read unchecked, so values are checked too.
RawEnv = Mapping[str, object]


@dataclass(frozen=True)
class JobFiles:
    """The parsed contents of a job folder (or of a bare log, with the rest left empty)."""

    lines: tuple[str, ...] = ()
    events: tuple[AnyEvent, ...] = ()
    config: RawConfig = field(default_factory=dict)
    env: RawEnv = field(default_factory=dict)
    exit_record: ExitRecord | None = None
    peak_usage: PeakUsage | None = None  # the engine's measure (None: it never ran the job, or a bare log)

    def last_event(self, kind: type[E]) -> E | None:
        for event in reversed(self.events):
            if isinstance(event, kind):
                return event
        return None


def check_readable(path: Path) -> None:
    """A path given to triage must be a folder or a file it can read to an end: a pipe or a socket
    would block it, a file it may not open has nothing to say. A path that is gone (a job folder
    removed) is no error: the exit status still says something."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TriageError(f"cannot read it: {exc.strerror}", where=str(path)) from exc
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise TriageError("a pipe or a socket, not a job folder or a log file", where=str(path))
    if not stat.S_ISDIR(mode) and not os.access(path, os.R_OK):
        raise TriageError("cannot read it: permission denied", where=str(path))


def read_tail(path: Path, limit: int) -> tuple[bytes, bool]:
    """At most the last ``limit`` bytes of a file (the first ``limit`` of an endless one such as
    /dev/zero), and whether more came before them. Pipes and sockets are not opened: they block."""
    try:
        if not (stat.S_ISREG(mode := path.stat().st_mode) or stat.S_ISCHR(mode)):
            return b"", False
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                fh.seek(size - limit)
            return fh.read(limit), size > limit
    except OSError:
        return b"", False


def read_tail_lines(path: Path, limit: int = TAIL_BYTES) -> list[str]:
    """The log's last ``limit`` bytes as lines, ANSI colours removed, a cut first line dropped."""
    data, cut = read_tail(path, limit)
    lines = _ANSI.sub("", data.decode("utf-8", errors="replace")).splitlines()
    return lines[1:] if cut and lines else lines


def read_mapping(path: Path, loader: Callable[[str], object]) -> dict[str, Any]:
    """A small file LAT wrote, parsed: anything else (too large, not parsed, not a mapping) is empty."""
    raw, cut = read_tail(path, MAPPING_BYTES)
    if cut:
        return {}
    try:
        data = loader(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def read_job_dir(job_dir: Path, env: RawEnv | None = None) -> JobFiles:
    """``env``: the job's live environment; ``command.json`` (written at planning) only stands in
    for it when triage runs by hand on a folder."""
    folder = JobDir(job_dir)
    if env is None:
        saved = read_mapping(job_dir / COMMAND, json.loads).get("env")
        env = saved if isinstance(saved, dict) else {}
    return JobFiles(
        lines=tuple(read_tail_lines(folder.train_log)),
        events=folder.read_events(EVENTS_TAIL_BYTES).events,
        config=read_mapping(folder.job_yaml, yaml.safe_load),
        env=env,
        exit_record=folder.latest_exit_record(),
        peak_usage=folder.read_peak_usage(),
    )


def read_log_file(log: Path) -> JobFiles:
    return JobFiles(lines=tuple(read_tail_lines(log)))


def config_value(config: RawConfig, dotted: str, default: object = None) -> object:
    """``config_value(cfg, "train.batch_size", 8)``: a nested value, or ``default`` when absent."""
    node: object = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def whole_number(config: RawConfig, dotted: str, default: int | None) -> int | None:
    """A whole-number field (``train.batch_size``) as an int, ``default`` when absent or null, None
    when it holds anything else (text, a fraction, NaN, a list): a remedy then has nothing to scale."""
    value = config_value(config, dotted, default)
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) else None
