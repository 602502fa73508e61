"""THE rule for "which checkpoints can a job resume from".

The trainer (``--resume``), the engine (an ``on_failure`` retry resumes only when there is a
checkpoint) and the front ends (requeue offers ``--resume``) must agree: a retry that requeues with
``--resume`` on a folder the trainer refuses fails where it should have started fresh.

A checkpoint counts when its save finished: the folder is named exactly ``checkpoint-<step>``
(not a ``.tmp`` or other half-written name, not a symlink), its adapter weights are a non-empty
file, and its ``trainer_state.json`` (written last by every saver) holds a JSON object.
"""

from __future__ import annotations

import json
from pathlib import Path

from lat_core.contract.jobdir.names import ADAPTER_WEIGHTS, CHECKPOINT, TRAINER_STATE


def checkpoint_dirs(job_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every folder named like a checkpoint, complete or not, oldest first."""
    try:
        entries = list(job_dir.iterdir())
    except OSError:
        return []
    named = ((CHECKPOINT.match(p.name), p) for p in entries)
    return sorted((int(m.group(1)), p) for m, p in named if m and p.is_dir() and not p.is_symlink())


def checkpoint_is_complete(folder: Path) -> bool:
    """True when the save of ``folder`` finished (see the module's docstring for the rule)."""
    weights, state = folder / ADAPTER_WEIGHTS, folder / TRAINER_STATE
    try:
        if not (weights.is_file() and weights.stat().st_size > 0 and state.is_file()):
            return False
        return isinstance(json.loads(state.read_text(encoding="utf-8")), dict)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
