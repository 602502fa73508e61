"""Read what a job left behind: the log's tail, its events, its config and its exit record.

Everything here is best effort: a job that died hard may have left a torn events line, no exit
record or no config, and triage must still say as much as the remaining files allow.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

#: Only the end of a log decides a death; reading 256 KiB keeps triage fast on multi-GB logs.
TAIL_BYTES = 256 * 1024

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class JobFiles:
    """The parsed contents of a job folder (or of a bare log, with the rest left empty)."""

    lines: tuple[str, ...] = ()
    events: tuple[dict, ...] = ()
    config: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    exit_record: dict | None = None

    def last_event(self, name: str) -> dict | None:
        for event in reversed(self.events):
            if event.get("event") == name:
                return event
        return None


def read_tail_lines(path: Path, limit: int = TAIL_BYTES) -> list[str]:
    """The log's last ``limit`` bytes as lines, ANSI colours removed, a cut first line dropped."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return []
    lines = _ANSI.sub("", data.decode("utf-8", errors="replace")).splitlines()
    return lines[1:] if size > limit and lines else lines


def read_events(path: Path) -> list[dict]:
    """Every well-formed event; a torn or corrupt line is skipped, never fatal."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    events = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def read_mapping(path: Path, loader) -> dict:
    try:
        data = loader(path.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def latest_exit_record(job_dir: Path) -> dict | None:
    """The exit record of the highest-numbered attempt (``.lat/attempt-N.exit.json``)."""
    records = sorted(job_dir.glob(".lat/attempt-*.exit.json"), key=_attempt_number)
    if not records:
        return None
    return read_mapping(records[-1], json.loads) or None


def _attempt_number(path: Path) -> int:
    match = re.search(r"attempt-(\d+)\.exit\.json$", path.name)
    return int(match.group(1)) if match else -1


def read_job_dir(job_dir: Path, env: dict | None = None) -> JobFiles:
    """``env``: the job's live environment; ``command.json`` (written at planning) only stands in
    for it when triage runs by hand on a folder."""
    if env is None:
        command = read_mapping(job_dir / "command.json", json.loads)
        env = command.get("env") if isinstance(command.get("env"), dict) else {}
    return JobFiles(
        lines=tuple(read_tail_lines(job_dir / "train.log")),
        events=tuple(read_events(job_dir / "events.jsonl")),
        config=read_mapping(job_dir / "job.yaml", yaml.safe_load),
        env=env,
        exit_record=latest_exit_record(job_dir),
    )


def read_log_file(log: Path) -> JobFiles:
    return JobFiles(lines=tuple(read_tail_lines(log)))


def config_value(config: dict, dotted: str, default=None):
    """``config_value(cfg, "train.batch_size", 8)``: a nested value, or ``default`` when absent."""
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node
