"""The shapes triage hands out: a Diagnosis and its ranked Remedies.

Both are frozen so a diagnosis can be stored in the journal, shown by a UI and compared in tests
without anyone mutating it on the way; ``to_json`` gives the one wire format every front end uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lat_core.triage.classes import FailureClass


@dataclass(frozen=True)
class Remedy:
    """One thing to change before a retry.

    ``patch`` keys say where the change goes: dotted lower-case keys are job config fields
    (``train.batch_size``), UPPER_CASE keys are environment variables, ``plan.*`` keys are
    plan-level settings (``plan.slots_delta: -1`` means one job fewer per GPU).
    """

    key: str
    change: str
    cost: str
    patch: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"key": self.key, "change": self.change, "cost": self.cost, "patch": dict(self.patch)}


@dataclass(frozen=True)
class Diagnosis:
    """Why a job ended the way it did, with the numbers and log lines that decided it."""

    cls: FailureClass
    title: str
    diagnosis: str
    remedies: tuple[Remedy, ...] = ()
    numbers: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.cls != FailureClass.OK

    def __post_init__(self):
        object.__setattr__(self, "cls", FailureClass(self.cls))  # a stored string reads back typed

    def one_line(self) -> str:
        """A short reason for the journal's job row (the title is already cut at a word boundary)."""
        return f"{self.cls}: {self.title}"

    def to_json(self) -> dict:
        return {
            "class": self.cls.value,
            "title": self.title,
            "diagnosis": self.diagnosis,
            "remedies": [r.to_json() for r in self.remedies],
            "numbers": dict(self.numbers),
            "evidence": list(self.evidence),
        }
