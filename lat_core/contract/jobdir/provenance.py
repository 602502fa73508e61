"""What a job's ``overrides.json`` says of its place in a sweep: the values its point sets, the
experiment config they were laid over, and whether it is a stage-1 (screening) job.

The front end writes the file when it plans the job (lat_core.front.jobs: one row per value set,
each with its ``source``); the results read it back here to tabulate a sweep by its values. Why the
file and not the folder's name: ``lr2e-4_r16`` is shortened for reading, the rows hold each value as
the job trained it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

# the ``source`` of a provenance row: a sweep point's value, and what stage 1 lays over each point
SWEEP_SOURCE, SCREEN_SOURCE = "sweep", "sweep screen"
SUITE_CONFIG_SOURCE = "suite config"  # the first row: the experiment YAML the job was made from
SweptValue = Any  # a JSON scalar, or a tuple of them (a swept list, target_modules)


@dataclass(frozen=True)
class SweepPoint:
    """A sweep job's point: ``values`` as (field as swept, value) in the sweep's order (``train.lr``,
    ``HP_BATCH_SIZE``), ``config`` the experiment config's stem, ``screen`` a stage-1 job."""

    values: tuple[tuple[str, SweptValue], ...]
    config: str
    screen: bool = False

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(field for field, _ in self.values)

    @classmethod
    def from_rows(cls, rows: object) -> SweepPoint | None:
        """The point that provenance ``rows`` (overrides.json) record; None for a job of no sweep
        (no sweep row, or no file: ``rows`` None). SweepRowsError says why rows that may be a
        sweep job's cannot be read: not a list of rows (not JSON, another version's, a hand-made
        file), or a sweep row without a field or a swept value (a scalar or a list of them)."""
        if rows is None:
            return None
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise SweepRowsError("not a list of provenance rows")
        values = tuple(_swept(i, row) for i, row in enumerate(rows) if row.get("source") == SWEEP_SOURCE)
        if not values:
            return None
        screen = any(row.get("source") == SCREEN_SOURCE for row in rows)
        return cls(values, _config_stem(rows), screen)


class SweepRowsError(ValueError):
    """overrides.json's rows cannot say the job's sweep point (the message says why)."""


def _swept(index: int, row: dict[str, Any]) -> tuple[str, SweptValue]:
    field = row.get("field")
    if not isinstance(field, str) or not field:
        raise SweepRowsError(f"row {index}, a sweep value, has no field")
    if "value" not in row:
        raise SweepRowsError(f"row {index}, the sweep's {field}, has no value")
    if not _is_swept_value(row["value"]):
        raise SweepRowsError(f"row {index}, the sweep's {field}: a {type(row['value']).__name__} is not a swept value")
    return field, _hashable(row["value"])


def _is_swept_value(value: object) -> bool:
    """What the front end writes for a point's value (lat_core.front.sweep.Value): a JSON scalar or
    a list of swept values; a mapping would not group (it is not hashable)."""
    if isinstance(value, list):
        return all(_is_swept_value(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def _config_stem(rows: Sequence[dict[str, Any]]) -> str:
    config = made_from(rows)
    return PurePath(config).stem if config else "?"


def made_from(rows: object) -> str | None:
    """The experiment YAML that provenance ``rows`` say the job was made from (a rerun's rows keep
    its original's); None for rows not of this shape or without one."""
    if not isinstance(rows, list):
        return None
    config = next((row.get("value") for row in rows if isinstance(row, dict) and row.get("source") == SUITE_CONFIG_SOURCE),
                  None)
    return config if isinstance(config, str) and config else None


def _hashable(value: object) -> SweptValue:
    """A swept list (JSON keeps a tuple as a list) as a tuple, so points compare and group."""
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value
