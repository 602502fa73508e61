"""Machine-readable progress events: one JSON object per line in events.jsonl.

Why: the engine and TUI tail this file while the job runs, so each line is
written whole and flushed at once, and always carries `t` (unix time) and
`event` so readers never need the human log.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any


def log(msg: str) -> None:
    """Human log line (the engine redirects stdout into train.log)."""
    print(msg, flush=True)


def _clean(value: Any) -> Any:
    """Make values JSON-safe: NaN/inf become None (strict JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class EventWriter:
    """Appends events to `<output_dir>/events.jsonl`, flushing after every line."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", buffering=1)

    def emit(self, event: str, **fields: Any) -> dict:
        """Write one event and return it."""
        record = {"t": time.time(), "event": event, **_clean(fields)}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        return record

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "EventWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_events(path: Path) -> list[dict]:
    """Parse an events file, skipping a torn last line if the writer was killed mid-write."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
