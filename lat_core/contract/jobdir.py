"""A job's folder and THE rule for "which checkpoints can a job resume from".

The trainer (``--resume``), the engine (an ``on_failure`` retry resumes only when there is a
checkpoint) and the front ends (requeue offers ``--resume``) must agree: a retry that requeues with
``--resume`` on a folder the trainer refuses fails where it should have started fresh.

A checkpoint counts when its save finished: the folder is named exactly ``checkpoint-<step>``
(not a ``.tmp`` or other half-written name, not a symlink), its adapter weights are a non-empty
file, and its ``trainer_state.json`` (written last by every saver) holds a JSON object.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from lat_core.safe_files import replace_file

CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # what every resume path loads (peft's file name)
RNG_STATE = "rng_state.pt"
OPTIMIZER_STATE = "optimizer.pt"
# the job's experiment-tracker run ({"id": ...}): every resume continues that run (lat_core/train/tracking.py)
TRACKER_RUN = "tracker_run.json"
TRACKER_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")   # what W&B and SwanLab take as a run id


class JobDir:
    """One job's folder; the files are read only when asked, and never raise on their content."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def checkpoint_dirs(self) -> list[tuple[int, Path]]:
        """(step, folder) of every folder named like a checkpoint, complete or not, oldest first."""
        try:
            entries = list(self.path.iterdir())
        except OSError:
            return []
        named = ((CHECKPOINT_NAME.match(p.name), p) for p in entries)
        return sorted((int(m.group(1)), p) for m, p in named if m and p.is_dir() and not p.is_symlink())

    def resumable_checkpoints(self) -> list[tuple[int, Path]]:
        """(step, folder) of the complete checkpoints, oldest first: the ones ``--resume`` takes."""
        return [(step, p) for step, p in self.checkpoint_dirs() if checkpoint_is_complete(p)]

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        """The newest complete checkpoint, or None when the job must start from the beginning."""
        found = self.resumable_checkpoints()
        return found[-1] if found else None

    def incomplete_checkpoints(self) -> list[Path]:
        """Checkpoint folders whose save did not finish (a crash mid-save): never resumed from."""
        return [p for _, p in self.checkpoint_dirs() if not checkpoint_is_complete(p)]

    def tracker_run_id(self) -> str | None:
        """The id of the tracker run the job's resumes continue; None when it has none (or the file
        is unreadable, or holds no valid id: the job then starts a new run)."""
        try:
            record = json.loads((self.path / TRACKER_RUN).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        run_id = record.get("id") if isinstance(record, dict) else None
        return run_id if isinstance(run_id, str) and TRACKER_RUN_ID.match(run_id) else None

    def write_tracker_run_id(self, run_id: str) -> None:
        """Keep ``run_id`` as the job's tracker run (replaced whole, inside the job's real folder)."""
        if not TRACKER_RUN_ID.match(run_id):
            raise ValueError(f"not a tracker run id: {run_id!r}")
        replace_file(self.path / TRACKER_RUN, json.dumps({"id": run_id}).encode())


def checkpoint_is_complete(folder: Path) -> bool:
    """True when the save of ``folder`` finished (see the module's docstring for the rule)."""
    weights, state = folder / ADAPTER_WEIGHTS, folder / TRAINER_STATE
    try:
        if not (weights.is_file() and weights.stat().st_size > 0 and state.is_file()):
            return False
        return isinstance(json.loads(state.read_text(encoding="utf-8")), dict)
    except (OSError, UnicodeDecodeError, ValueError):
        return False


def write_exit_record(path: str | Path, record: dict[str, Any]) -> None:
    """A job's exit record, on disk before it is renamed into place, inside the job's real folder
    (lat_core.safe_files): the runner, the engine (a job it stopped) and a group (a member's end) write it."""
    replace_file(Path(path), json.dumps(record).encode(), durable=True)
