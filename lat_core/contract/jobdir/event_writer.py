"""THE writer of ``events.jsonl``: the trainer, a fused group's members and the pretraining trainer
append their events here.

Why each line is written whole and flushed at once: the engine and the front ends tail the file
while the job runs. The file is opened relative to the real job folder and never through a symlink
(lat_core.safe_files): an output root may be shared with other users.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from lat_core.contract.jobdir.events import Event, event_to_json
from lat_core.safe_files import ensure_folder, open_append

E = TypeVar("E", bound=Event)


class EventWriter:
    """Appends events to one job's ``events.jsonl``, each stamped with the time it is written."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        ensure_folder(self.path.parent)
        self._fh = os.fdopen(open_append(self.path, job_dir=self.path.parent), "a", buffering=1, encoding="utf-8")

    def write(self, event: E) -> E:
        """Write one event (stamped now unless it carries its time) and return it as written."""
        if event.t is None:
            event = replace(event, t=time.time())
        self._fh.write(json.dumps(event_to_json(event)) + "\n")
        self._fh.flush()
        return event

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
