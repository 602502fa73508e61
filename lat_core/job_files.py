"""What the engine reads from a job's directory: progress and memory events, the log's last words."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from lat_core.triage.explain import shorten

LAST_LINE_CHARS = 300  # the job row's reason stays one line; triage's diagnosis keeps the full text


def memory_event_peak(job_dir: Path) -> int:
    """The trainer's own peak GPU memory (torch's allocator) from its ``memory`` event."""
    try:
        lines = (job_dir / "events.jsonl").read_text(errors="replace").splitlines()[-10:]
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "memory":
            return int(event.get("peak_gpu_bytes") or 0)
    return 0


def last_step(chunk: bytes) -> tuple[int, float] | None:
    last = None
    for line in chunk.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a corrupt line must not stop progress reading
        if isinstance(event, dict) and event.get("event") == "step" and "loss" in event:
            last = (int(event.get("step", 0)), float(event["loss"]))
    return last


def describe_exit(returncode: int | None, job_dir: Path, diagnosis=None) -> str:
    """One line for the job row: how it ended, the triage class, and the log's last words
    (unless triage already names the cause precisely)."""
    if returncode is None:
        what = "the job's runner vanished without an exit record"
    elif returncode < 0:
        what = f"killed by {signal.Signals(-returncode).name}"
    else:
        what = f"exit code {returncode}"
    if diagnosis is not None:
        what = f"{what}: {diagnosis.one_line()}"
    precise = diagnosis is not None and diagnosis.cls.info.names_cause
    last = "" if precise else last_log_line(job_dir / "train.log")
    return f"{what}: {last}" if last else what


def last_log_line(log: Path) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return shorten(lines[-1], LAST_LINE_CHARS) if lines else ""
