"""A job folder's small JSON files: written whole, read bounded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lat_core.safe_files import replace_file

SMALL_FILE_BYTES = 64 * 1024  # a record larger than this is no file LAT wrote
UNREADABLE: Any = ...  # what read_small_json returns for a file that is there but not JSON


def read_small_json(path: Path, limit: int = SMALL_FILE_BYTES) -> Any:
    """A small JSON file's value, None when missing; one too large or not JSON reads as UNREADABLE."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    try:
        return json.loads(data) if len(data) <= limit else UNREADABLE
    except (ValueError, UnicodeDecodeError, RecursionError):
        return UNREADABLE


def write_json(path: Path, value: Any, *, durable: bool = False) -> None:
    """``value`` as JSON, replacing the file whole (written beside it, then renamed, never through a
    planted symlink: lat_core.safe_files): a reader never sees half a record, whatever the writer's
    fate. ``durable``: on disk before the rename (an exit record must survive a crash)."""
    replace_file(path, json.dumps(value).encode(), durable=durable)
