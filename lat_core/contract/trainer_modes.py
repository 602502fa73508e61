"""How the trainer starts on a job folder (its command's flags), by name: what the engine reads off a
job's command (lat_core.engine.fusion, lat_core.engine.pack) and a warm pack's runner is told per member
(``--modes``, lat_core.train.pack). One table, so both sides of that command line agree."""
from __future__ import annotations

from collections.abc import Sequence

TRAINER_MODES: dict[str, tuple[str, ...]] = {"fresh": (), "resume": ("--resume",), "overwrite": ("--overwrite",)}


def mode_of(flags: Sequence[str]) -> str | None:
    """The mode whose flags these are, or None (not a plain start of the trainer)."""
    return next((name for name, own in TRAINER_MODES.items() if tuple(flags) == own), None)
