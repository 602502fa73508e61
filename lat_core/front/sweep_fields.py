"""What a sweep may set, and the short label a job's folder names it by.

A swept field is a dotted field of the job schema (:class:`lat_core.config.job.JobConfig`, so a field
added there can be swept at once) or one of the seeds' variables of the environment table
(:data:`lat_core.config.env.ENV_FIELDS`), which stands for the field it sets.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, get_origin

from pydantic import BaseModel

from lat_core.config.env import ENV_FIELDS
from lat_core.config.job import JobConfig

# what the plan sets for each job: a sweep over them would contradict the pairs or the folders
PLAN_SET = {"name": "the job's name", "data": "the pairs", "seed": "the pairs", "output_dir": "the job's folder",
            "resolved": "the engine"}
_VARIABLE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def target(key: str) -> str:
    """The config field ``key`` sets: itself, or the field of a variable (HP_LR -> train.lr)."""
    return ENV_FIELDS[key].field if key in ENV_FIELDS else key


def field_problem(key: str) -> str | None:
    """Why ``key`` cannot be swept, or None."""
    if _VARIABLE.match(key) and key not in ENV_FIELDS:
        return (f"unknown variable {key!r}: a sweep sets config fields (train.lr) or the seeds' variables "
                "that set one (HP_LR, HP_BATCH_SIZE, ...)")
    field = target(key)
    top = field.split(".")[0]
    if top in PLAN_SET:
        via = f" ({key} sets {field})" if key != field else ""
        return f"{field} is set by {PLAN_SET[top]}, not a sweep{via}"
    return _schema_problem(field)


def _schema_problem(field: str) -> str | None:
    parts = field.split(".")
    section: type[BaseModel] = JobConfig
    for i, part in enumerate(parts):
        spec = section.model_fields.get(part)
        known = [k for k, f in section.model_fields.items() if not f.exclude]
        if spec is None or spec.exclude:
            close = difflib.get_close_matches(part, known, 1)
            hint = f"did you mean {'.'.join([*parts[:i], close[0]])}?" if close else f"known: {', '.join(known)}"
            return f"unknown field {'.'.join(parts[:i + 1])!r} ({hint})"
        kind = spec.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            section = kind
            continue
        if i == len(parts) - 1 or _takes_any_key(kind):
            return None  # a value, or a key inside a free mapping (model.tiny.hidden_size)
        return f"{'.'.join(parts[:i + 1])!r} is a value, not a section"
    return f"{field!r} is a section: name one of its fields ({field}.{next(iter(section.model_fields))})"


def _takes_any_key(kind: Any) -> bool:
    return kind is Any or get_origin(kind) is dict or kind is dict


def field_label(key: str, fields: list[str]) -> str:
    """``lr`` for train.lr (and HP_LR): the field's last part, or all of it (``train-lr``) where two
    swept fields end alike."""
    leaves = [target(f).rsplit(".", 1)[-1] for f in fields]
    leaf = target(key).rsplit(".", 1)[-1]
    return leaf if leaves.count(leaf) == 1 else target(key).replace(".", "-")
