"""What a job's folder holds, and the one place its events are read and checked.

A job writes ``events.jsonl`` (one JSON object a line), ``train.log`` and, through its runner,
``.lat/attempt-N.exit.json`` with a ``.pid`` file beside it. Everything read from there is input
from a process that may have crashed, diverged or gone mad: each reader here returns typed values
or skips (and counts) what does not fit, reads in bounded chunks, and never raises on content.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from lat_core.contract.jobdir import JobDir
from lat_core.safe_files import replace_file
from lat_core.text import shorten, signal_name

EVENTS_FILE = "events.jsonl"
TRAIN_LOG = "train.log"
RUNNER_DIR = ".lat"
CHUNK_BYTES = 64 * 1024
MAX_EVENT_BYTES = 1024 * 1024  # a longer line is skipped unread: no event needs that much


def events_path(job_dir: Path) -> Path:
    return Path(job_dir) / EVENTS_FILE


def exit_record_path(job_dir: Path, attempt: int) -> Path:
    return Path(job_dir) / RUNNER_DIR / f"attempt-{attempt}.exit.json"


def pid_file_path(exit_path: Path) -> Path:
    return Path(f"{exit_path}.pid")


def cancel_marker_path(job_dir: Path) -> Path:
    """A job trained in a fused group (lat_core/train/fused) is cancelled by this file: the group's
    process is shared, so a signal would stop every member; the group leaves out a member whose
    marker exists before its next micro-batch."""
    return Path(job_dir) / RUNNER_DIR / "cancel"


def usage_path(job_dir: Path) -> Path:
    return Path(job_dir) / RUNNER_DIR / "usage.json"


# ---------------------------------------------------------------------------- event schema
class BadEvent(ValueError):
    """A line of events.jsonl that is not a valid event; the message says why, never the line."""


@dataclass(frozen=True)
class Event:
    """Any well-formed event; ``fields`` holds the rest of the object (eval metrics, ...)."""

    name: str
    t: float | None
    fields: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class StepEvent(Event):
    step: int = 0
    loss: float | None = None  # None: the loss was NaN or infinite (the trainer writes null then)


@dataclass(frozen=True)
class MemoryEvent(Event):
    peak_gpu_bytes: int = 0


def parse_event(line: bytes | str) -> Event:
    """One line -> a typed event, or :class:`BadEvent` naming what is wrong."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEvent(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise BadEvent(f"not a JSON object but {_kind(obj)}")
    name, t = obj.get("event"), obj.get("t")
    if not isinstance(name, str):
        raise BadEvent(f"'event' must be a string, got {_kind(name)}")
    if t is not None and not _is_number(t):
        raise BadEvent(f"'t' must be a number, got {_kind(t)}")
    t = float(t) if t is not None else None
    if name == "step":
        return StepEvent(name, t, obj, step=_count(obj, "step"), loss=_finite(obj, "loss"))
    if name == "memory":
        return MemoryEvent(name, t, obj, peak_gpu_bytes=_count(obj, "peak_gpu_bytes", default=0))
    return Event(name, t, obj)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


def _count(obj: dict, key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if value is None or not _is_number(value) or not math.isfinite(value) or value < 0 or value != int(value):
        raise BadEvent(f"{obj['event']} event: {key!r} must be a whole number >= 0, got {_kind(value)}")
    return int(value)


def _finite(obj: dict, key: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if not _is_number(value):
        raise BadEvent(f"{obj['event']} event: {key!r} must be a number, got {_kind(value)}")
    return float(value) if math.isfinite(value) else None


# ---------------------------------------------------------------------------- reading
@dataclass
class EventTail:
    """Reads the events appended to a job's events.jsonl since the last call, in bounded chunks.

    Only complete lines are consumed (the writer may be mid-line). Bad lines are skipped and
    counted, with the first reason kept; a line over :data:`MAX_EVENT_BYTES` is skipped without
    ever being held whole in memory."""

    path: Path
    offset: int = 0
    bad_lines: int = 0
    first_bad: str | None = None
    _lines_seen: int = field(default=0, init=False, repr=False)
    _skipping: bool = field(default=False, init=False, repr=False)  # inside an overlong line: drop to its newline

    @classmethod
    def near_end(cls, path: Path, window: int = MAX_EVENT_BYTES) -> "EventTail":
        """A tail that starts ``window`` bytes before the end (at the next line start): an engine
        restarted on a long job needs its latest progress, not every step since the start."""
        try:
            size = Path(path).stat().st_size
        except OSError:
            size = 0
        tail = cls(Path(path), offset=max(0, size - window))
        tail._skipping = tail.offset > 0  # the first line is cut: drop it uncounted
        tail._lines_seen = -1 if tail._skipping else 0
        return tail

    def read(self) -> Iterator[Event]:
        """The new valid events, one at a time (a restarted engine reads a long file in bounded memory)."""
        try:
            fh = open(self.path, "rb")
        except OSError:
            return
        with fh:
            fh.seek(self.offset)
            pending = bytearray()
            while chunk := fh.read(CHUNK_BYTES):
                if self._skipping:
                    chunk = self._skip_to_newline(chunk)
                pending += chunk
                *lines, rest = pending.split(b"\n")
                for line in lines:
                    self.offset += len(line) + 1
                    self._lines_seen += 1
                    if event := self._parse(line):
                        yield event
                pending = rest
                if len(pending) > MAX_EVENT_BYTES:
                    self.offset += len(pending)
                    pending = bytearray()
                    self._skipping = True
                    self._bad(self._lines_seen + 1, f"a line over {MAX_EVENT_BYTES // 1024} KiB")

    def _skip_to_newline(self, chunk: bytes) -> bytes:
        """Drop the rest of an overlong line (already counted); what follows its end is kept."""
        end = chunk.find(b"\n")
        if end < 0:
            self.offset += len(chunk)
            return b""
        self.offset += end + 1
        self._lines_seen += 1
        self._skipping = False
        return chunk[end + 1:]

    def _parse(self, line: bytes) -> Event | None:
        if not line.strip():
            return None
        try:
            return parse_event(line)
        except BadEvent as exc:
            self._bad(self._lines_seen, str(exc))
            return None

    def _bad(self, line_no: int, reason: str) -> None:
        """``line_no`` counts from where this tail began reading."""
        self.bad_lines += 1
        if self.first_bad is None:
            self.first_bad = f"line {line_no}: {reason}"


def last_progress(events: Iterable[Event]) -> tuple[int, float | None] | None:
    """(step, loss) of the last step event: what the job table shows."""
    last = None
    for event in events:
        if isinstance(event, StepEvent):
            last = (event.step, event.loss)
    return last


def tail_events(job_dir: Path, max_bytes: int = CHUNK_BYTES) -> list[Event]:
    """The valid events among the last ``max_bytes`` of events.jsonl (a cheap look at the end)."""
    try:
        with open(events_path(job_dir), "rb") as fh:
            start = max(0, fh.seek(0, os.SEEK_END) - max_bytes)
            fh.seek(start)
            data = fh.read(max_bytes)
    except OSError:
        return []
    lines = data.split(b"\n")[1 if start else 0:]  # the first line may be cut
    out = []
    for line in filter(bytes.strip, lines):
        try:
            out.append(parse_event(line))
        except BadEvent:
            continue
    return out


LAST_LINE_CHARS = 300  # the job row's reason stays one line; triage's diagnosis keeps the full text


def memory_event_peak(job_dir: Path) -> int:
    """The trainer's own peak GPU memory (torch's allocator) from its last ``memory`` event."""
    peaks = [e.peak_gpu_bytes for e in tail_events(job_dir) if isinstance(e, MemoryEvent)]
    return peaks[-1] if peaks else 0


def has_finished(job_dir: Path) -> bool:
    """The trainer wrote its ``finished`` event among the last few (it ends a succeeded job's file;
    an older success followed by a rerun's events does not count)."""
    return any(e.name == "finished" for e in tail_events(job_dir)[-5:])


def finished_since(job_dir: Path, since: float) -> float | None:
    """When the job last wrote ``finished`` at or after ``since``. A finish ends its attempt's
    events, so the end of the file is where to look (a launch never reads a long file whole)."""
    times = [e.t for e in tail_events(job_dir) if e.name == "finished" and e.t and e.t >= since]
    return max(times) if times else None


# ---------------------------------------------------------------------------- exit records
@dataclass(frozen=True)
class ExitRecord:
    """The runner's record of how an attempt ended; ``problem`` says why a record was unusable."""

    returncode: int | None
    max_rss: int | None = None
    ended: float | None = None
    problem: str | None = None


@dataclass(frozen=True)
class PidRecord:
    pid: int
    pid_start: float | None
    rss_at_fork: int = 0  # a warm-started job's memory inherited from the preloaded process (bytes)


def read_exit(exit_path: Path) -> ExitRecord | None:
    """None while there is no record; a record that is not the runner's shape ends the attempt
    with an unknown exit code and a reason, rather than leaving it open forever."""
    raw = _read_json(Path(exit_path))
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return ExitRecord(None, problem="the exit record is unreadable")
    rc, rss, ended = raw.get("returncode"), raw.get("max_rss"), raw.get("ended")
    if rc is not None and (not isinstance(rc, int) or isinstance(rc, bool)):
        return ExitRecord(None, problem=f"the exit record's returncode is {_kind(rc)}, not an integer")
    if rc is not None and not -128 <= rc <= 255:  # exit codes are a byte; deaths by signal are negative
        return ExitRecord(None, problem=f"the exit record's returncode {rc} is out of range")
    return ExitRecord(rc, rss if isinstance(rss, int) and rss > 0 else None, ended if _is_number(ended) else None)


def read_pid_record(exit_path: Path) -> PidRecord | None:
    raw = _read_json(pid_file_path(exit_path))
    if not isinstance(raw, dict) or not isinstance(raw.get("pid"), int) or raw["pid"] <= 0:
        return None
    start, inherited = raw.get("pid_start"), raw.get("rss_at_fork")
    inherited = inherited if isinstance(inherited, int) and not isinstance(inherited, bool) and inherited > 0 else 0
    return PidRecord(raw["pid"], float(start) if _is_number(start) else None, inherited)


@dataclass(frozen=True)
class PeakUsage:
    """A job's peak memory as the engine measured it (its trainer's process tree, see
    lat_core.monitor.usage), kept in the job folder when an attempt ends so that the results tables
    show the number ``status`` shows. None: never measured."""

    rss_bytes: int | None
    gpu_bytes: int | None


def write_json_file(path: Path, value) -> None:
    """``value`` as JSON, replacing the file whole (written beside it, then renamed): a reader never
    sees half a record, whatever the writer's fate."""
    replace_file(path, json.dumps(value).encode())  # never through a planted symlink (lat_core.safe_files)


def write_peak_usage(job_dir: Path, usage: PeakUsage) -> None:
    write_json_file(usage_path(job_dir), {"peak_rss_bytes": usage.rss_bytes, "peak_gpu_bytes": usage.gpu_bytes})


def read_peak_usage(job_dir: Path) -> PeakUsage | None:
    """None when the engine never wrote one (a trainer run by hand) or it is not this shape."""
    raw = _read_json(usage_path(job_dir))
    if not isinstance(raw, dict):
        return None

    def count(key: str) -> int | None:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    return PeakUsage(count("peak_rss_bytes"), count("peak_gpu_bytes"))


def _read_json(path: Path, limit: int = CHUNK_BYTES):
    """A small JSON file, or None when missing; a file that is not JSON reads as ``...``."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    try:
        return json.loads(data) if len(data) <= limit else ...
    except (ValueError, UnicodeDecodeError):
        return ...


def describe_exit(returncode: int | None, job_dir: Path, diagnosis=None) -> str:
    """One line for the job row: how it ended, the triage class, and the log's last words
    (unless triage already names the cause precisely)."""
    if returncode is None:
        what = "the job's runner vanished without an exit record"
    elif returncode < 0:
        what = f"killed by {signal_name(-returncode)}"
    else:
        what = f"exit code {returncode}"
    told = diagnosis.one_line() if diagnosis is not None else ""
    if told and what.lower() not in told.lower():  # "killed: Killed by SIGKILL" would say it twice
        what = f"{what}: {told}"
    precise = diagnosis is not None and diagnosis.cls.info.names_cause
    last = "" if precise else last_log_line(Path(job_dir) / TRAIN_LOG)
    return f"{what}: {last}" if last else what


def last_log_line(log: Path) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return shorten(lines[-1], LAST_LINE_CHARS) if lines else ""


def resumable_checkpoints(job_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, folder) of the job's complete checkpoints, oldest first: the ones ``--resume`` takes
    (THE checkpoint rule, lat_core.contract.jobdir, which the trainer uses too)."""
    return JobDir(job_dir).resumable_checkpoints()


def requeue_start(job_dir: str | Path, asked: str | None) -> tuple[str, str]:
    """How a failed or cancelled job requeued with the others starts: ``(start, what it got)``.
    ``fresh`` when asked, else it resumes from its newest complete checkpoint, or starts fresh when
    it left none (``--resume`` on a folder without one would fail the job at once)."""
    found = resumable_checkpoints(job_dir) if asked != "fresh" else []
    if found:
        return "resume", f"resume from {found[-1][1].name}"
    return "fresh", "fresh (asked)" if asked == "fresh" else "fresh (no checkpoint)"
