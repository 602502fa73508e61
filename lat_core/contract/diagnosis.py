"""A Diagnosis and its ranked Remedies, each a list of typed changes: what triage hands out and the
journal keeps for a job (``JobRow.diagnosis``), so the type lives in the contract, below triage.

All are frozen so a diagnosis can be stored in the journal, shown by a UI and compared in tests
without anyone mutating it on the way; ``to_json``/``from_json`` are the one wire format every
front end and the journal's ``diagnosis_json`` use. The engine applies every change kind in one
place (:mod:`lat_core.engine.remedy`); a kind it cannot apply fails a test there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Union

from lat_core.config.env import ENV_FIELDS, parse_env_value
from lat_core.contract.failure_classes import FailureClass


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
CHANGE_KINDS: tuple[type[Change], ...] = (ConfigChange, EnvChange, SlotsChange, AvoidDevice, Resume, BackendOption)
_BY_KIND: dict[str, type[Change]] = {cls.kind: cls for cls in CHANGE_KINDS}
# each kind's (field, annotation), read once: a run's jobs list decodes thousands of stored changes
_FIELDS_OF: dict[str, tuple[tuple[str, str], ...]] = {
    cls.kind: tuple((f.name, str(f.type)) for f in fields(cls)) for cls in CHANGE_KINDS}
JsonObject = dict[str, Any]


class DiagnosisError(ValueError):
    """A stored diagnosis (or one of its remedies or changes) that is not what ``to_json`` writes."""


def change_to_json(change: Change) -> JsonObject:
    return {"kind": change.kind, **{f.name: getattr(change, f.name) for f in fields(change)}}


def change_from_json(data: object) -> Change:
    data = _object(data, "a remedy change")
    cls = _BY_KIND.get(str(data.get("kind")))
    if cls is None:
        raise DiagnosisError(f"unknown remedy change kind {data.get('kind')!r} (known: {', '.join(_BY_KIND)})")
    spec = _FIELDS_OF[cls.kind]
    missing = [name for name, _ in spec if name not in data]
    if missing:
        raise DiagnosisError(f"remedy change {cls.kind!r} lacks {', '.join(missing)}")
    wrong = [name for name, annotation in spec if not _of_type(data[name], annotation)]
    if wrong:
        raise DiagnosisError(f"remedy change {cls.kind!r}: {', '.join(wrong)} of the wrong type")
    return cls(**{name: data[name] for name, _ in spec})


def _of_type(value: object, annotation: str) -> bool:
    """Whether a stored value fits a change field's annotation (``str``, ``int`` or ``Any``)."""
    if annotation == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, str) if annotation == "str" else True


def _object(data: object, what: str) -> JsonObject:
    if not isinstance(data, dict):
        raise DiagnosisError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def _list(data: object, what: str) -> list[Any]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise DiagnosisError(f"{what}: expected a JSON list, got {type(data).__name__}")
    return data


def _text(data: JsonObject, key: str, default: str = "") -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise DiagnosisError(f"{key!r}: expected text, got {type(value).__name__}")
    return value


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

    def __post_init__(self) -> None:
        if self.changes and not self.patch:
            object.__setattr__(self, "patch", dict(c.patch_item() for c in self.changes))
        elif self.patch and not self.changes:
            object.__setattr__(self, "changes", tuple(parse_patch_item(k, v) for k, v in self.patch.items()))

    def to_json(self) -> JsonObject:
        return {"key": self.key, "change": self.change, "cost": self.cost, "patch": dict(self.patch),
                "changes": [change_to_json(c) for c in self.changes]}

    @classmethod
    def from_json(cls, data: object) -> Remedy:
        """From ``to_json``'s output; a journal written before typed changes holds only ``patch``.
        DiagnosisError when it is not that."""
        data = _object(data, "a remedy")
        key = _text(data, "key")
        if not key:
            raise DiagnosisError("a remedy without a key")
        change, cost = _text(data, "change"), _text(data, "cost")
        if "changes" in data:
            changes = tuple(change_from_json(c) for c in _list(data["changes"], f"remedy {key!r} changes"))
            return cls(key, change, cost, {}, changes)
        try:
            return cls(key, change, cost, dict(_object(data.get("patch") or {}, f"remedy {key!r} patch")))
        except (ValueError, TypeError) as exc:  # a patch key with no meaning, a value of the wrong type
            raise DiagnosisError(str(exc)) from None


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "cls", FailureClass(self.cls))  # a stored string reads back typed

    def one_line(self) -> str:
        """A short reason for the journal's job row (the title is already cut at a word boundary)."""
        return f"{self.cls}: {self.title}"

    def to_json(self) -> JsonObject:
        return {
            "class": self.cls.value,
            "title": self.title,
            "diagnosis": self.diagnosis,
            "remedies": [r.to_json() for r in self.remedies],
            "numbers": dict(self.numbers),
            "evidence": list(self.evidence),
        }

    @classmethod
    def from_json(cls, data: object) -> Diagnosis:
        """From ``to_json``'s output; DiagnosisError (naming what is wrong) when it is not that."""
        data = _object(data, "a diagnosis")
        klass = FailureClass.parse(data.get("class", FailureClass.EXIT_CODE))
        if klass is None:
            raise DiagnosisError(f"unknown failure class {data.get('class')!r}")
        remedies = tuple(Remedy.from_json(r) for r in _list(data.get("remedies"), "'remedies'"))
        evidence = _list(data.get("evidence"), "'evidence'")
        if not all(isinstance(line, str) for line in evidence):
            raise DiagnosisError("'evidence': expected lines of text")
        return cls(klass, _text(data, "title"), _text(data, "diagnosis"), remedies,
                   dict(_object(data.get("numbers") or {}, "'numbers'")), tuple(evidence))
