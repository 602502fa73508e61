"""Tail a growing text file by byte offset, in 64 KiB chunks, with a bounded first read.

The reader is a pure function of (state, file) so a worker thread can run it and hand the new
state back to the UI thread, which owns it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

CHUNK_BYTES = 64 * 1024
MAX_CHUNKS_PER_READ = 4
FIRST_READ_BYTES = CHUNK_BYTES * MAX_CHUNKS_PER_READ


@dataclass(frozen=True)
class TailState:
    """Where the next read starts: just after the last complete line handed out."""

    path: Path | None = None
    offset: int = -1  # -1: not opened yet, so the first read starts near the end
    generation: int = 0  # bumped by the UI when the tailed job changes; stale reads are dropped


def read_tail(state: TailState, *, ended: bool = False) -> tuple[list[str], TailState]:
    """New complete lines since ``state`` and the state to continue from; once the writer has
    ended (``ended``), a last line without its newline is complete too (a crash's last words)."""
    if state.path is None:
        return [], state
    try:
        size = os.path.getsize(state.path)
    except OSError:
        return [], state  # not created yet: the trainer writes it once the job starts
    start = _start_offset(state.offset, size)
    skipped = max(start - state.offset, 0) if state.offset >= 0 else 0
    data = _read_chunks(state.path, start, size)
    consumed = len(data) if ended else _complete_part(data)
    lines = data[:consumed].decode("utf-8", errors="replace").split("\n")
    lines = lines[:-1] if not lines[-1] else lines
    if (state.offset < 0 or skipped) and start > 0 and lines:
        lines = lines[1:]  # the first line was cut by starting mid-file
    if skipped:
        lines.insert(0, f"[... {skipped // 1024} KiB of log skipped to keep up ...]")
    return [line.rstrip("\r") for line in lines], replace(state, offset=start + consumed)


def _complete_part(data: bytes) -> int:
    """Bytes up to the last newline; a full buffer without any newline is taken whole."""
    cut = data.rfind(b"\n") + 1
    if cut == 0 and len(data) >= FIRST_READ_BYTES:
        return len(data)
    return cut


def _start_offset(offset: int, size: int) -> int:
    """Start near the end on the first read, and when the writer got more than a read ahead (a
    pane that shows the newest lines is worth more than one that falls further behind each poll);
    from 0 again when the file was truncated."""
    if offset < 0 or size - offset > FIRST_READ_BYTES:
        return max(size - FIRST_READ_BYTES, 0)
    if size < offset:
        return 0
    return offset


def _read_chunks(path: Path, offset: int, size: int) -> bytes:
    parts = []
    with open(path, "rb") as fh:
        fh.seek(offset)
        for _ in range(MAX_CHUNKS_PER_READ):
            if offset >= size:
                break
            chunk = fh.read(min(CHUNK_BYTES, size - offset))
            if not chunk:
                break
            parts.append(chunk)
            offset += len(chunk)
    return b"".join(parts)
