"""THE reader of ``events.jsonl``: every process that reads a job's events reads them here.

The file is input from a process that may have crashed mid-line, diverged or gone mad, or from an
older or newer LAT: a torn last line, a line that is not JSON, an unknown kind of event or a field
of the wrong type is skipped and counted, with the first reason kept, and never raises. Files are
read in bounded chunks (a 100 MB line is skipped without being held whole).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lat_core.contract.jobdir.events import AnyEvent, BadEvent, Step, event_from_json

CHUNK_BYTES = 64 * 1024
MAX_EVENT_BYTES = 1024 * 1024  # a longer line is skipped unread: no event needs that much


def decode_event(line: bytes | bytearray | str) -> AnyEvent:
    """One line -> its typed event, or :class:`BadEvent` naming what is wrong."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEvent(f"not JSON ({type(exc).__name__})") from None
    return event_from_json(obj)


@dataclass
class Skips:
    """Lines skipped so far: how many, and the first one's reason (``line N: why``)."""

    count: int = 0
    first: str | None = None

    def add(self, line_no: int, reason: str) -> None:
        self.count += 1
        if self.first is None:
            self.first = f"line {line_no}: {reason}"


@dataclass(frozen=True)
class EventsRead:
    """The valid events of a file (or of its end), and what was skipped."""

    events: tuple[AnyEvent, ...] = ()
    skipped: Skips = field(default_factory=Skips)

    def of(self, kind: type[AnyEvent]) -> list[AnyEvent]:
        return [e for e in self.events if isinstance(e, kind)]


def decode_lines(lines: Iterable[bytes | bytearray | str], first_line_no: int = 1) -> EventsRead:
    """The events among ``lines`` (blank ones ignored), the others skipped with their reasons."""
    events, skips = [], Skips()
    for n, line in enumerate(lines, first_line_no):
        if not line.strip():
            continue
        try:
            events.append(decode_event(line))
        except BadEvent as exc:
            skips.add(n, str(exc))
    return EventsRead(tuple(events), skips)


def decode_text(text: str) -> EventsRead:
    """A whole file's text (the results scan's hot path). One C-level parse of the whole file is
    several times faster than a json.loads per line; a file with a line that is not JSON falls back
    to reading line by line."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        objects = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        return decode_lines(lines)
    if len(objects) != len(lines):  # a line holding two objects ("{..}, {..}"): tell them apart
        return decode_lines(lines)
    events, skips = [], Skips()
    for n, obj in enumerate(objects, 1):
        try:
            events.append(event_from_json(obj))
        except BadEvent as exc:
            skips.add(n, str(exc))
    return EventsRead(tuple(events), skips)


def read_events(path: Path, last_bytes: int | None = None) -> EventsRead:
    """The events of the file, or of its last ``last_bytes`` (a cut first line dropped, uncounted);
    a missing or unreadable file has none."""
    try:
        with open(path, "rb") as fh:
            start = 0 if last_bytes is None else max(0, fh.seek(0, os.SEEK_END) - last_bytes)
            fh.seek(start)
            data = fh.read() if last_bytes is None else fh.read(last_bytes)
    except OSError:
        return EventsRead()
    lines = data.split(b"\n")[1 if start else 0:]
    torn = lines.pop() if lines and not data.endswith(b"\n") else b""
    read = decode_lines(lines)
    if torn.strip():
        try:
            read = EventsRead((*read.events, decode_event(torn)), read.skipped)
        except BadEvent:
            read.skipped.add(len(lines) + 1, "torn: the last line has no end (its writer stopped mid-line)")
    return read


def last_progress(events: Iterable[AnyEvent]) -> tuple[int, float | None] | None:
    """(step, loss) of the last step event: what the job table shows."""
    last = None
    for event in events:
        if isinstance(event, Step):
            last = (event.step, event.loss)
    return last


@dataclass
class EventTail:
    """Reads the events appended to a job's events.jsonl since the last call, in bounded chunks.

    Only complete lines are consumed (the writer may be mid-line). Bad lines are skipped and
    counted in ``skipped``; a line over :data:`MAX_EVENT_BYTES` is skipped without ever being held
    whole in memory."""

    path: Path
    offset: int = 0
    skipped: Skips = field(default_factory=Skips)
    _lines_seen: int = field(default=0, init=False, repr=False)
    _skipping: bool = field(default=False, init=False, repr=False)  # inside an overlong line: drop to its newline

    @classmethod
    def near_end(cls, path: Path, window: int = MAX_EVENT_BYTES) -> EventTail:
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

    def read(self) -> Iterator[AnyEvent]:
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
                    if event := self._decode(line):
                        yield event
                pending = rest
                if len(pending) > MAX_EVENT_BYTES:
                    self.offset += len(pending)
                    pending = bytearray()
                    self._skipping = True
                    self.skipped.add(self._lines_seen + 1, f"a line over {MAX_EVENT_BYTES // 1024} KiB")

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

    def _decode(self, line: bytes | bytearray) -> AnyEvent | None:
        """``_lines_seen`` counts from where this tail began reading."""
        if not line.strip():
            return None
        try:
            return decode_event(line)
        except BadEvent as exc:
            self.skipped.add(self._lines_seen, str(exc))
            return None
