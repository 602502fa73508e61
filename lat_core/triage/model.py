"""The shapes triage hands out: a Diagnosis and its ranked Remedies, each a list of typed changes.

All are frozen so a diagnosis can be stored in the journal, shown by a UI and compared in tests
without anyone mutating it on the way; ``to_json``/``from_json`` are the one wire format every
front end and the journal's ``diagnosis_json`` use. The engine applies every change kind in one
place (:mod:`lat_core.engine.remedy`); a kind it cannot apply fails a test there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Union

from lat_core.config.env import ENV_FIELDS, parse_env_value
from lat_core.triage.classes import FailureClass


@dataclass(frozen=True)
class ConfigChange:
    """Set a job config field (dotted: ``train.batch_size``) in the job's ``job.yaml``."""
    field: str
    value: Any
    kind: ClassVar[str] = "config"

    def patch_item(self) -> tuple[str, Any]:
        return self.field, self.value


@dataclass(frozen=True)
class EnvChange:
    """Set an environment variable in the job's env (the journal's job env)."""
    name: str
    value: str
    kind: ClassVar[str] = "env"

    def patch_item(self) -> tuple[str, Any]:
        return self.name, self.value


@dataclass(frozen=True)
class SlotsChange:
    """Change the slot count of the device the job failed on by ``delta``."""
    delta: int
    kind: ClassVar[str] = "slots"

    def patch_item(self) -> tuple[str, Any]:
        return "plan.slots_delta", self.delta


@dataclass(frozen=True)
class AvoidDevice:
    """Never place this job on the device it failed on again."""
    kind: ClassVar[str] = "avoid_device"

    def patch_item(self) -> tuple[str, Any]:
        return "plan.exclude_failed_device", True


@dataclass(frozen=True)
class Resume:
    """Restart from the job's last checkpoint (``--resume``) instead of from scratch."""
    kind: ClassVar[str] = "resume"

    def patch_item(self) -> tuple[str, Any]:
        return "plan.resume", True


@dataclass(frozen=True)
class BackendOption:
    """A per-job option of the run's backend (Slurm: ``time``, ``mem``), overriding the plan's."""
    name: str
    value: Any
    kind: ClassVar[str] = "backend"

    def patch_item(self) -> tuple[str, Any]:
        return f"plan.slurm.{self.name}", self.value


Change = Union[ConfigChange, EnvChange, SlotsChange, AvoidDevice, Resume, BackendOption]
CHANGE_KINDS: tuple[type, ...] = (ConfigChange, EnvChange, SlotsChange, AvoidDevice, Resume, BackendOption)
_BY_KIND = {cls.kind: cls for cls in CHANGE_KINDS}


def change_to_json(change: Change) -> dict:
    return {"kind": change.kind, **{f.name: getattr(change, f.name) for f in fields(change)}}


def change_from_json(data: dict) -> Change:
    cls = _BY_KIND.get(data.get("kind"))
    if cls is None:
        raise ValueError(f"unknown remedy change kind {data.get('kind')!r} (known: {', '.join(_BY_KIND)})")
    return cls(**{f.name: data[f.name] for f in fields(cls)})


def parse_patch_item(key: str, value: Any) -> Change:
    """One ``patch`` entry as a typed change; an unknown ``plan.*`` key is an error, never ignored.

    A variable of the env table (``REPORT_TO``, ``GLA_USE_MAX_NEW_TOKENS``, ...) becomes the config field it
    sets: a job launched by the engine trains its ``job.yaml`` and ignores those variables."""
    if key == "plan.slots_delta":
        return SlotsChange(int(value))
    if key == "plan.exclude_failed_device" and value is True:
        return AvoidDevice()
    if key == "plan.resume" and value is True:
        return Resume()
    if key.startswith("plan.slurm.") and value is not None:
        return BackendOption(key.removeprefix("plan.slurm."), value)
    if key.startswith("plan."):
        raise ValueError(f"remedy patch key {key!r} = {value!r} has no meaning (known: plan.slots_delta, "
                         "plan.exclude_failed_device: true, plan.resume: true, plan.slurm.<option>: value)")
    if key in ENV_FIELDS:  # a config variable: the engine-written job.yaml is what the trainer trains
        return ConfigChange(ENV_FIELDS[key].field, parse_env_value(key, str(value)))
    if key.isupper():
        return EnvChange(key, str(value))
    if key and key == key.lower() and "." in key:
        return ConfigChange(key, value)
    raise ValueError(f"remedy patch key {key!r}: expected a dotted config field, an UPPER_CASE variable or plan.*")


@dataclass(frozen=True)
class Remedy:
    """One thing to change before a retry: ``changes``, parsed from ``patch`` when not given.

    ``patch`` keys say where the change goes: dotted lower-case keys are job config fields
    (``train.batch_size``), UPPER_CASE keys are environment variables, ``plan.*`` keys are
    run or backend settings (``plan.slots_delta: -1`` means one job fewer per GPU).
    """

    key: str
    change: str
    cost: str
    patch: dict[str, Any] = field(default_factory=dict)
    changes: tuple[Change, ...] = ()

    def __post_init__(self):
        if self.changes and not self.patch:
            object.__setattr__(self, "patch", dict(c.patch_item() for c in self.changes))
        elif self.patch and not self.changes:
            object.__setattr__(self, "changes", tuple(parse_patch_item(k, v) for k, v in self.patch.items()))

    def to_json(self) -> dict:
        return {"key": self.key, "change": self.change, "cost": self.cost, "patch": dict(self.patch),
                "changes": [change_to_json(c) for c in self.changes]}

    @classmethod
    def from_json(cls, data: dict) -> "Remedy":
        """From ``to_json``'s output; a journal written before typed changes holds only ``patch``."""
        if "changes" in data:
            changes = tuple(change_from_json(c) for c in data["changes"])
            return cls(data["key"], data.get("change", ""), data.get("cost", ""), {}, changes)
        return cls(data["key"], data.get("change", ""), data.get("cost", ""), dict(data.get("patch") or {}))


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

    @classmethod
    def from_json(cls, data: dict) -> "Diagnosis":
        return cls(data.get("class", "exit_code"), data.get("title", ""), data.get("diagnosis", ""),
                   tuple(Remedy.from_json(r) for r in data.get("remedies") or ()),
                   dict(data.get("numbers") or {}), tuple(data.get("evidence") or ()))
