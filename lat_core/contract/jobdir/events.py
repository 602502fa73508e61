"""The events a job writes to ``events.jsonl``: one frozen type per kind, shared by the writer and
every reader.

On disk an event is one JSON object a line: ``{"t": <unix time>, "event": <kind>, <fields>...}``.
A field the writer has no value for (None) is left out of the line, and reads back as None: so a
line of an older trainer, a test's stand-in or a fused member (which has fewer fields) reads as the
same type. Fields a reader does not know are ignored (a newer trainer's additions); a field of the
wrong type makes the whole line a :class:`BadEvent`, whose message names the field, never the value.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar, Union

SIGNED: Mapping[str, bool] = {"signed": True}  # an int field that may be negative (a seed)


class BadEvent(ValueError):
    """A line of events.jsonl that is not a valid event; the message says why, never the line."""


@dataclass(frozen=True)
class SpeedMode:
    """How a speed mode (CUDA graphs, packing) was chosen for the job: the setting asked for
    (``auto``, true, false), whether it is on, and why."""

    setting: str | bool
    on: bool
    why: str

    @classmethod
    def from_json(cls, raw: object) -> SpeedMode:
        if not isinstance(raw, dict) or not isinstance(raw.get("on"), bool) or not isinstance(raw.get("why"), str) \
                or not isinstance(raw.get("setting"), (str, bool)):
            raise BadEvent(f"must be {{setting, on, why}}, got {_kind(raw)}")
        return cls(raw["setting"], raw["on"], raw["why"])


@dataclass(frozen=True)
class EarlyStop:
    """Training ended before ``max_steps`` because the validation ``metric`` did not get better for
    ``patience`` evaluations in a row (train.early_stopping): a success, said as such everywhere."""

    step: int
    max_steps: int
    metric: str
    patience: int

    def line(self) -> str:
        """``stopped early at step 6 of 40 (no better accuracy for 2 evals)``: the engine's history,
        the results' Jobs section."""
        return (f"stopped early at step {self.step} of {self.max_steps} "
                f"(no better {self.metric} for {self.patience} evals)")

    @classmethod
    def from_json(cls, raw: object) -> EarlyStop:
        if not isinstance(raw, dict) or not isinstance(raw.get("metric"), str) \
                or not all(type(raw.get(k)) is int and raw[k] >= 0 for k in ("step", "max_steps", "patience")):
            raise BadEvent(f"must be {{step, max_steps, metric, patience}}, got {_kind(raw)}")
        return cls(raw["step"], raw["max_steps"], raw["metric"], raw["patience"])


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event has: when it was written (None on a line without ``t``)."""

    kind: ClassVar[str] = ""
    t: float | None = None


@dataclass(frozen=True, kw_only=True)
class Started(Event):
    """The job began training: what it is, where it runs and how it was set up. A job alone and a
    fused member share every field but these: ``gradient_checkpointing`` and ``dataloader`` are a
    job alone's (a member has no loader of its own: its group's), ``fused_group`` (the group's size)
    only a member's; ``world`` and ``pretrain`` (the resolved preset) are the pretraining trainer's."""

    kind: ClassVar[str] = "started"
    pid: int | None = None
    config: str | None = None
    model: str | None = None
    device: str | None = None
    seed: int | None = field(default=None, metadata=SIGNED)
    data: str | None = None
    task: str | None = None  # the task its metrics are computed for (cola: mcc), whatever the dataset's name
    metric: str | None = None  # the validation metric it ranks evaluations by (best/, early stopping, results)
    higher_is_better: bool | None = None  # that metric's direction
    name_or_path: str | None = None
    peft_method: str | None = None
    dtype: str | None = None
    trainable_params: int | None = None
    total_params: int | None = None
    resumed_from: int | None = None  # the step it resumed at; None: started fresh
    max_steps: int | None = None
    batch_size: int | None = None
    grad_accum: int | None = None
    effective_batch_size: int | None = None
    epochs: float | None = None
    train_examples: int | None = None
    lr_scheduler: str | None = None
    warmup_steps: int | None = None
    logits_to_keep: int | str | None = None  # a count, or the setting ("auto") where the model takes none
    save_optimizer_state: bool | None = None
    optimizer_state: str | None = None  # on resume: "restored" or "fresh"
    report_to: tuple[str, ...] | None = None  # the trackers that log this job
    graphs: SpeedMode | None = None
    pack: SpeedMode | None = None
    gradient_checkpointing: bool | None = None
    dataloader: Mapping[str, Any] | None = None
    setup_s: Mapping[str, Any] | None = None  # seconds per set-up phase
    mamba_fast_path: bool | None = None
    slow_path_warning: str | None = None
    kernels: str | None = None  # how its GPU kernels came, forked from a warm-up (contract.kernel_warmup)
    fused_group: int | None = None
    world: int | None = None
    pretrain: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Step(Event):
    """A logged training step. ``loss`` None: it was not finite (or not logged)."""

    kind: ClassVar[str] = "step"
    step: int
    loss: float | None = None
    lr: float | None = None
    tokens_per_s: float | None = None
    tokens: int | None = None
    peak_gpu_bytes: int | None = None  # torch's allocator peak so far


@dataclass(frozen=True, kw_only=True)
class Eval(Event):
    """One split's evaluation at a step (metric name -> value)."""

    kind: ClassVar[str] = "eval"
    step: int
    split: str = "validation"
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CheckpointSaved(Event):
    kind: ClassVar[str] = "checkpoint"
    step: int
    path: str | None = None  # the folder's name in the job folder (checkpoint-<step>)
    optimizer_saved: bool | None = None

    @property
    def folder_name(self) -> str:
        return self.path or f"checkpoint-{self.step}"


@dataclass(frozen=True, kw_only=True)
class Memory(Event):
    """The trainer's own peaks at its end: its process's RSS and torch's GPU allocation."""

    kind: ClassVar[str] = "memory"
    peak_rss_bytes: int | None = None
    peak_gpu_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class Finished(Event):
    kind: ClassVar[str] = "finished"
    status: str = "ok"
    steps: int | None = None
    best: Mapping[str, Any] | None = None  # the best validation eval: step, metric, value
    elapsed_s: float | None = None
    stopped_early: EarlyStop | None = None  # None: it ran to max_steps


@dataclass(frozen=True, kw_only=True)
class Failed(Event):
    """The trainer's own account of the exception that ended it (a kill leaves none)."""

    kind: ClassVar[str] = "failed"
    error_type: str | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class TrackerRunOpened(Event):
    """The experiment-tracker run this attempt logs to (lat_core/train/tracker_run.py): the job's
    run ``continued`` by a resume, which already ``held`` the step and eval logs up to those steps,
    or a new one (``replaced``: the job's earlier run, left behind)."""

    kind: ClassVar[str] = "tracker_run"
    id: str
    continued: bool = False
    replaced: str | None = None
    report_to: tuple[str, ...] = ()
    held: Mapping[str, Any] = field(default_factory=dict)  # "step" / "eval" -> the last step the run holds


AnyEvent = Union[Started, Step, Eval, CheckpointSaved, Memory, Finished, Failed, TrackerRunOpened]
EVENT_TYPES: tuple[type[AnyEvent], ...] = (Started, Step, Eval, CheckpointSaved, Memory, Finished, Failed,
                                           TrackerRunOpened)


# ------------------------------------------------------------------------------ writing
def event_to_json(event: Event) -> dict[str, Any]:
    """The line's object: ``t`` and ``event`` first, then every field that has a value."""
    values = {k: _plain(v) for k, v in asdict(event).items() if k != "t" and v is not None}
    return {"t": event.t, "event": event.kind, **values}


def _plain(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None (strict JSON has none), tuples lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ------------------------------------------------------------------------------ reading
def event_from_json(obj: object) -> AnyEvent:
    """A decoded line -> its typed event, or :class:`BadEvent` naming what is wrong."""
    if not isinstance(obj, dict):
        raise BadEvent(f"not a JSON object but {_kind(obj)}")
    name, t = obj.get("event"), obj.get("t")
    if not isinstance(name, str):
        raise BadEvent(f"'event' must be a string, got {_kind(name)}")
    schema = _SCHEMAS.get(name)
    if schema is None:
        raise BadEvent(f"unknown kind of event {name[:40]!r}")
    if type(t) is not float and t is not None:
        if not _is_number(t):
            raise BadEvent(f"'t' must be a number, got {_kind(t)}")
        t = float(t)
    return schema.build(obj, t)


Check = Callable[[Any], Any]


class _Schema:
    """How one event type's fields are read: a check per field, the defaults, the required ones.
    Built once per type from its annotations; every line of that kind goes through it."""

    def __init__(self, cls: type[AnyEvent]) -> None:
        hints = typing.get_type_hints(cls)
        self.cls = cls
        self.checks: dict[str, Check] = {}
        self.defaults: dict[str, Any] = {"t": None}
        self.required: set[str] = set()
        for f in fields(cls):
            if f.name == "t":
                continue
            self.checks[f.name] = _check_for(hints[f.name], bool(f.metadata.get("signed")))
            if f.default is not MISSING:
                self.defaults[f.name] = f.default
            elif f.default_factory is not MISSING:
                self.defaults[f.name] = f.default_factory()
            else:
                self.required.add(f.name)
        self.size = len(self.defaults) + len(self.required)  # of a built event's values

    def build(self, obj: dict[str, Any], t: float | None) -> AnyEvent:
        values = self.defaults.copy()
        values["t"] = t
        checks, required = self.checks, self.required  # locals: a results scan reads ~half a million lines
        name = ""
        try:
            for name, raw in obj.items():
                check = checks.get(name)
                if check is not None and (raw is not None or name in required):
                    values[name] = check(raw)
        except BadEvent as exc:
            raise BadEvent(f"{self.cls.kind} event: {name!r} {exc}") from None
        if len(values) < self.size:
            missing = sorted(self.required - values.keys())
            raise BadEvent(f"{self.cls.kind} event: {missing[0]!r} is missing")
        event = object.__new__(self.cls)  # checked above: the dataclass's __init__ would only repeat it
        event.__dict__.update(values)
        return event


def _check_for(hint: Any, signed: bool) -> Check:
    """The check of one annotation: ``int``, ``float``, ``str``, ``bool``, ``Mapping``,
    ``tuple[str, ...]``, :class:`SpeedMode`, :class:`EarlyStop`, or a union of them with None."""
    options = [a for a in typing.get_args(hint) if a is not type(None)] \
        if typing.get_origin(hint) in (Union, types.UnionType) else [hint]
    checks = [_SIMPLE_CHECKS[typing.get_origin(a) or a] for a in options]
    if signed:
        checks = [_whole if c is _count else c for c in checks]
    if len(checks) == 1:
        return checks[0]
    return lambda raw: _first_fit(checks, raw)


def _first_fit(checks: list[Check], raw: Any) -> Any:
    expected = []
    for check in checks:
        try:
            return check(raw)
        except BadEvent as exc:
            expected.append(str(exc).removeprefix("must be ").rpartition(", got ")[0])
    raise BadEvent(f"must be {' or '.join(expected)}, got {_kind(raw)}")


def _count(raw: Any) -> int:
    if type(raw) is int and raw >= 0:  # the common case first: a scan reads ~half a million
        return raw
    if not _is_number(raw) or not math.isfinite(raw) or raw < 0 or raw != int(raw):
        raise BadEvent(f"must be a whole number >= 0, got {_kind(raw)}")
    return int(raw)


def _whole(raw: Any) -> int:
    if not _is_number(raw) or not math.isfinite(raw) or raw != int(raw):
        raise BadEvent(f"must be a whole number, got {_kind(raw)}")
    return int(raw)


def _number(raw: Any) -> float | None:
    """A number; one that is not finite (NaN, 1e400) reads as unknown, not as an error."""
    if type(raw) is float:
        return raw if math.isfinite(raw) else None
    if not _is_number(raw):
        raise BadEvent(f"must be a number, got {_kind(raw)}")
    return float(raw)


def _of_type(kind: type, what: str) -> Check:
    def check(raw: Any) -> Any:
        if type(raw) is not kind:
            raise BadEvent(f"must be {what}, got {_kind(raw)}")
        return raw
    return check


def _mapping(raw: Any) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise BadEvent(f"must be an object, got {_kind(raw)}")
    return raw


def _texts(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise BadEvent(f"must be a list of strings, got {_kind(raw)}")
    return tuple(raw)


def _speed_mode(raw: Any) -> SpeedMode:
    return SpeedMode.from_json(raw)


def _early_stop(raw: Any) -> EarlyStop:
    return EarlyStop.from_json(raw)


_SIMPLE_CHECKS: dict[Any, Check] = {
    int: _count, float: _number, str: _of_type(str, "a string"), bool: _of_type(bool, "true or false"),
    Mapping: _mapping, tuple: _texts, SpeedMode: _speed_mode, EarlyStop: _early_stop,
}
_SCHEMAS = {cls.kind: _Schema(cls) for cls in EVENT_TYPES}


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
