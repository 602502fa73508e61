"""A run's plan as the journal keeps it (``runs.plan_yaml``, written by ``Plan.to_yaml``), read once
into a frozen type: ``RunRow.plan``. The engine and the front ends read its fields; nobody else
parses the text.

``Plan.to_yaml`` leaves out fields at their default, so every field missing here takes the one
table of defaults (:mod:`lat_core.contract.plan_defaults`), except ``fuse`` and ``breaker``, which
``to_yaml`` always writes: a saved plan without one comes from before it existed, so it runs as then
(no fused groups, no circuit breaker). Keys this LAT does not know (a newer LAT's) are ignored, and so is a text that holds no
mapping. Text that is not YAML, or a field of the wrong type, is a damaged plan: the field reads as
its default and ``problem`` says what is wrong, and the engine starts nothing more of the run (one
clear error in its history) instead of guessing.

A decoded plan is shared by every row with the same text (the engine reads its runs every tick, and a
plan of 10,000 pairs takes 40 ms to parse), so all of it is immutable: mappings are read-only views,
lists are tuples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Callable, Literal, Mapping, Union

import yaml

from lat_core.contract.plan_defaults import PLAN_DEFAULTS as D

Gpus = Union[Literal["cpu"], tuple[int, ...]]
Slots = Union[Literal["auto"], int, tuple[int, ...]]
Fuse = Union[Literal["auto"], bool]
BACKENDS = ("local", "slurm")
FUSE_IF_UNSAVED: Fuse = False  # a plan saved before fusion was the default: no groups, as then
BREAKER_IF_UNSAVED = 0  # a plan saved before the circuit breaker: off, as then
EMPTY: Mapping[str, Any] = MappingProxyType({})
# what PyYAML's safe loader raises on text it cannot read (lat_core.config.yaml_files says why)
_PARSER_FAULTS = (yaml.YAMLError, ValueError, TypeError, AttributeError, RecursionError)


def _empty() -> Mapping[str, Any]:
    return EMPTY


@dataclass(frozen=True)
class SavedSuite:
    name: str
    rounds: Literal["all"] | tuple[int, ...] = "all"


@dataclass(frozen=True)
class OnOom:
    """``on_oom:``: retry an OOM-killed job with the first of ``remedies`` that triage offers."""
    remedies: tuple[str, ...]
    max_retries: int = D.max_retries


@dataclass(frozen=True)
class OnFailure:
    """``on_failure:``: retry a job that failed with one of ``classes`` as it is, after ``backoff_s``."""
    classes: tuple[str, ...]
    max_retries: int = D.max_retries
    backoff_s: float = D.backoff_s


@dataclass(frozen=True)
class SavedPlan:
    """The fields of :class:`lat_core.front.plan.Plan`, as saved (secrets masked: ``env`` and
    ``notify`` hold ``***`` where a credential was; the run's secrets file has them)."""
    text: str = ""  # as the journal keeps it
    suites: tuple[SavedSuite, ...] = ()
    pairs: tuple[str, ...] = ()  # "seed:dataset"
    gpus: Gpus = D.gpus
    slots: Slots = D.slots
    countdown_minutes: float = D.countdown_minutes
    env: Mapping[str, str] = field(default_factory=_empty)
    output_root: str = D.output_root
    overrides: Mapping[str, Any] = field(default_factory=_empty)
    sweep: Mapping[str, Any] = field(default_factory=_empty)  # as written; lat_core.front.sweep reads it
    after: tuple[int, ...] = ()  # ids of the jobs every job of the plan waited for, when it was made
    datasets: Mapping[str, Any] = field(default_factory=_empty)  # name -> a dataset named by its columns
    notify: Mapping[str, Any] = field(default_factory=_empty)
    gpus_per_job: int = D.gpus_per_job
    min_free_gb: float = D.min_free_gb
    backend: str = D.backend
    slurm: Mapping[str, Any] = field(default_factory=_empty)  # checked where the Slurm backend is made
    on_oom: OnOom | None = None
    on_failure: OnFailure | None = None
    resume: bool = D.resume
    overwrite: bool = D.overwrite
    mps: bool = D.mps
    fuse: Fuse = FUSE_IF_UNSAVED
    warm_start: bool = D.warm_start
    allow_cpu: bool = D.allow_cpu
    breaker: int = BREAKER_IF_UNSAVED
    configs: str | None = None  # the user's config tree the suites came from (absolute); None: the shipped one
    problem: str | None = field(default=None, compare=False)  # what is damaged; None when nothing

    @classmethod
    def from_text(cls, text: str) -> SavedPlan:
        return _decode(text)

    def mapping(self) -> dict[str, Any]:
        """The saved plan as a fresh mapping of plan fields, to validate again as a Plan (jobs added
        to the run are expanded against its own plan); {} when the text holds no mapping."""
        try:
            data = _load(self.text)
        except _PARSER_FAULTS:
            return {}  # a damaged plan: its ``problem`` says why
        return data if isinstance(data, dict) else {}


class _Wrong(ValueError):
    """A saved field that is not of its type."""


@lru_cache(maxsize=64)
def _decode(text: str) -> SavedPlan:
    try:
        data = _load(text)
    except _PARSER_FAULTS as exc:
        return SavedPlan(text, problem=f"not YAML ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
    if not isinstance(data, dict):
        return SavedPlan(text)  # no plan fields in it (an empty text, a test's placeholder): every default
    fields: dict[str, Any] = {}
    problems = []
    for key, decode in _DECODERS.items():
        if data.get(key) is None:
            continue  # left out (or null): the default
        try:
            fields[key] = decode(data[key])
        except _Wrong as exc:
            problems.append(f"field {key!r}: {exc}")
        except RecursionError:
            problems.append(f"field {key!r}: nested too deeply")
    return SavedPlan(text, **fields, problem="; ".join(problems) or None)


def _load(text: str) -> Any:
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _got(value: object) -> str:
    return f"got {type(value).__name__} {str(value)[:60]!r}"


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Wrong(f"expected a whole number, {_got(value)}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Wrong(f"expected a number, {_got(value)}")
    return float(value)


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Wrong(f"expected true or false, {_got(value)}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise _Wrong(f"expected text, {_got(value)}")
    return value


def _words(value: object) -> tuple[str, ...]:
    """A list of scalars, or words in one string."""
    if isinstance(value, str):
        return tuple(value.split())
    if not isinstance(value, list) or any(isinstance(v, (dict, list)) for v in value):
        raise _Wrong(f"expected a list, {_got(value)}")
    return tuple(str(v) for v in value)


def _numbers(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise _Wrong(f"expected a list of whole numbers, {_got(value)}")
    return tuple(_whole(v) for v in value)


def _frozen(value: object) -> Any:
    """A YAML value that nobody can change: read-only mappings, tuples for lists."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _mapping(value: object) -> Mapping[str, Any]:
    frozen: Mapping[str, Any] = _frozen(_section(value))
    return frozen


def _section(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Wrong(f"expected a mapping, {_got(value)}")
    return value


def _env(value: object) -> Mapping[str, str]:
    env = _section(value)
    if any(isinstance(v, (dict, list)) for v in env.values()):
        raise _Wrong("expected NAME: value pairs")
    return MappingProxyType({str(k): str(v) for k, v in env.items()})


def _suites(value: object) -> tuple[SavedSuite, ...]:
    if not isinstance(value, list):
        raise _Wrong(f"expected a list of suites, {_got(value)}")
    return tuple(_suite(s) for s in value)


def _suite(value: object) -> SavedSuite:
    if isinstance(value, str):
        return SavedSuite(value)
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise _Wrong(f"expected a suite as {{name, rounds}}, {_got(value)}")
    rounds = value.get("rounds", "all")
    if rounds == "all" or rounds is None:
        return SavedSuite(value["name"])
    return SavedSuite(value["name"], (_whole(rounds),) if isinstance(rounds, int) else _numbers(rounds))


def _gpus(value: object) -> Gpus:
    return "cpu" if value == "cpu" else (_whole(value),) if isinstance(value, int) else _numbers(value)


def _slots(value: object) -> Slots:
    return "auto" if value == "auto" else _whole(value) if isinstance(value, int) else _numbers(value)


def _backend(value: object) -> str:
    if value not in BACKENDS:
        raise _Wrong(f"expected one of {', '.join(BACKENDS)}, {_got(value)}")
    return str(value)


def _fuse(value: object) -> Fuse:
    if value != "auto" and not isinstance(value, bool):
        raise _Wrong(f"expected auto, true or false, {_got(value)}")
    return "auto" if value == "auto" else bool(value)


def _on_oom(value: object) -> OnOom:
    section = _section(value)
    return OnOom(_words(section.get("remedies") or []), _whole(section.get("max_retries", D.max_retries)))


def _on_failure(value: object) -> OnFailure:
    section = _section(value)
    return OnFailure(_words(section.get("classes") or []), _whole(section.get("max_retries", D.max_retries)),
                     _number(section.get("backoff_s", D.backoff_s)))


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "suites": _suites, "pairs": _words, "gpus": _gpus, "slots": _slots, "countdown_minutes": _number,
    "env": _env, "output_root": _text, "overrides": _mapping, "datasets": _mapping, "sweep": _mapping,
    "after": _numbers, "notify": _mapping, "gpus_per_job": _whole,
    "min_free_gb": _number, "backend": _backend, "slurm": _mapping, "on_oom": _on_oom, "on_failure": _on_failure,
    "resume": _flag, "overwrite": _flag, "mps": _flag, "fuse": _fuse, "warm_start": _flag, "allow_cpu": _flag,
    "breaker": _whole, "configs": _text,
}
