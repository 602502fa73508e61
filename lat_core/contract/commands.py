"""Commands: what a front end asks the engine to do, one frozen dataclass per kind.

A front end builds one (a CLI verb, a TUI key, through the client), the journal stores it as its
``kind`` and its fields, and the engine reads it back and applies it with the one handler of its
type (``lat_core/engine/commands.py``), answering done, rejected or failed. A stored row that does
not decode (written by hand, or by another version of LAT) comes back as :class:`Undecodable` with
the reason, which the engine answers as a rejected command: a bad row never stops the engine.

A command's ``kind`` is stored in the journal, so it never changes once released. A command aimed
at one job carries its ``job_id``, which the journal keeps in its own column: the job's history
lists the command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, Self, TypeAlias, get_args

Start = Literal["resume", "fresh"]  # how a requeued job's new attempt starts (engine/requeue.py)
STARTS: tuple[Start, ...] = get_args(Start)
RESUME: Final[Start] = "resume"  # from the job's newest checkpoint
FRESH: Final[Start] = "fresh"  # from step 0, its checkpoints and events cleared
Status = Literal["pending", "done", "rejected", "failed"]
JobRecord: TypeAlias = dict[str, object]  # a new job as the journal inserts it (Store.add_jobs)
Fields: TypeAlias = Mapping[str, object]  # a command's fields as JSON holds them


class CommandError(ValueError):
    """Fields that do not make a command; the message is the engine's answer to it."""


class _NoFields:
    """The JSON of a command that carries nothing but its kind (not a command itself)."""

    kind: ClassVar[str]

    def to_json(self) -> dict[str, object]:
        return {}

    @classmethod
    def from_json(cls, data: Fields) -> Self:
        _only(cls, data)
        return cls()


# ---------------------------------------------------------------------- the run's countdown
@dataclass(frozen=True)
class SkipCountdown(_NoFields):
    """Start the run now rather than at the countdown's end."""

    kind: ClassVar[str] = "skip_countdown"


@dataclass(frozen=True)
class ExtendCountdown:
    """Push the countdown's end back by ``minutes``."""

    kind: ClassVar[str] = "extend_countdown"
    minutes: float = 5.0

    def to_json(self) -> dict[str, object]:
        return {"minutes": self.minutes}

    @classmethod
    def from_json(cls, data: Fields) -> Self:
        minutes = _only(cls, data, "minutes").get("minutes", cls.minutes)
        if isinstance(minutes, bool) or not isinstance(minutes, int | float):
            raise CommandError(f"minutes must be a number, got {minutes!r}")
        return cls(float(minutes))


# ---------------------------------------------------------------------- the run
@dataclass(frozen=True)
class CancelRun(_NoFields):
    """Nothing new starts; every running job is stopped."""

    kind: ClassVar[str] = "cancel_run"


@dataclass(frozen=True)
class PauseRun(_NoFields):
    """Stop admitting queued jobs; running ones go on."""

    kind: ClassVar[str] = "pause"


@dataclass(frozen=True)
class ResumeRun(_NoFields):
    """Admit queued jobs again after a pause."""

    kind: ClassVar[str] = "resume"


@dataclass(frozen=True)
class SetSlots:
    """How many jobs may run at once on one of the run's devices (whether it has that device, and
    a count >= 0, is the engine's to check: its answer says what was wrong)."""

    kind: ClassVar[str] = "set_slots"
    device: str
    slots: int

    def to_json(self) -> dict[str, object]:
        return {"device": self.device, "slots": self.slots}

    @classmethod
    def from_json(cls, data: Fields) -> Self:
        slots = _only(cls, data, "device", "slots").get("slots")
        if isinstance(slots, bool) or not isinstance(slots, int):
            raise CommandError(f"slots must be an integer >= 0, got {slots!r}")
        return cls(_text(data, "device"), slots)


@dataclass(frozen=True)
class AddJobs:
    """More jobs for the run, as the front end expanded them (``lat-tui add``)."""

    kind: ClassVar[str] = "add_jobs"
    jobs: tuple[JobRecord, ...]

    def to_json(self) -> dict[str, object]:
        return {"jobs": list(self.jobs)}

    @classmethod
    def from_json(cls, data: Fields) -> Self:
        jobs = _only(cls, data, "jobs").get("jobs")
        if not isinstance(jobs, list) or not all(isinstance(j, dict) and isinstance(j.get("key"), str) for j in jobs):
            raise CommandError(f"expected a list of job records with a key each, got {_short(jobs)}")
        return cls(tuple(jobs))


# ---------------------------------------------------------------------- jobs
@dataclass(frozen=True)
class CancelJob:
    """Stop one job (SIGTERM, SIGKILL after a grace; a fused member leaves its group)."""

    kind: ClassVar[str] = "cancel_job"
    job_id: int

    def to_json(self) -> dict[str, object]:
        return {"job_id": self.job_id}

    @classmethod
    def from_json(cls, data: Fields) -> Self:
        return cls(_job_id(_only(cls, data, "job_id")))


@dataclass(frozen=True)
class RequeueJob:
    """Run an ended job again: as asked by ``start`` (None: a failed job as planned, a succeeded
    one fresh), after applying the triage remedy ``remedy`` when one is named."""

    kind: ClassVar[str] = "requeue"
    job_id: int
    start: Start | None = None
    remedy: str | None = None

    def to_json(self) -> dict[str, object]:
        optional = {"start": self.start, "remedy": self.remedy}
        return {"job_id": self.job_id, **{k: v for k, v in optional.items() if v is not None}}

    @classmethod
    def from_json(cls, data: Fields) -> Self:
        remedy = _only(cls, data, "job_id", "start", "remedy").get("remedy")
        if remedy is not None and not isinstance(remedy, str):
            raise CommandError(f"remedy must be a remedy's key, got {remedy!r}")
        return cls(_job_id(data), _start(data), remedy or None)


@dataclass(frozen=True)
class RequeueJobs:
    """Failed or cancelled jobs of the run back to the queue at once, all of them or none
    (``lat-tui requeue --failed``); without ``start`` each resumes where it has a checkpoint."""

    kind: ClassVar[str] = "requeue_jobs"
    job_ids: tuple[int, ...]
    start: Start | None = None

    def to_json(self) -> dict[str, object]:
        return {"jobs": list(self.job_ids), **({"start": self.start} if self.start is not None else {})}

    @classmethod
    def from_json(cls, data: Fields) -> Self:
        start = _start(_only(cls, data, "jobs", "start"))  # checked first, as the engine always did
        ids = data.get("jobs")
        if not ids or not isinstance(ids, list) or not all(_is_int(i) for i in ids):
            raise CommandError(f"nothing was requeued: expected a list of job ids, got {_short(ids)}")
        return cls(tuple(ids), start)


Command: TypeAlias = (SkipCountdown | ExtendCountdown | CancelRun | PauseRun | ResumeRun | SetSlots | AddJobs
                      | CancelJob | RequeueJob | RequeueJobs)
COMMAND_TYPES: tuple[type[Command], ...] = get_args(Command)
BY_KIND: dict[str, type[Command]] = {t.kind: t for t in COMMAND_TYPES}


@dataclass(frozen=True)
class Undecodable:
    """A stored command that is none of the above, or whose fields do not fit its type."""

    kind: str
    job_id: int | None
    reason: str


# ---------------------------------------------------------------------- the journal's columns
def job_of(command: Command | Undecodable) -> int | None:
    """The job a command is aimed at, None for one aimed at the run."""
    return command.job_id if isinstance(command, CancelJob | RequeueJob | Undecodable) else None


def encode(command: Command) -> tuple[str, int | None, str]:
    """The journal's columns for a command: its kind, its job, the JSON of its other fields."""
    data = command.to_json()
    data.pop("job_id", None)
    return command.kind, job_of(command), json.dumps(data)


def decode(kind: str, job_id: int | None, args_json: str | None) -> Command | Undecodable:
    """The command of a journal row, or why it is none; never raises."""
    try:
        data = json.loads(args_json or "{}")
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep for the parser
        return Undecodable(kind, job_id, f"its fields are not JSON ({type(exc).__name__}: {str(exc)[:200]})")
    if not isinstance(data, dict):
        return Undecodable(kind, job_id, f"its fields are not a JSON object: {_short(data)}")
    try:
        return from_json({"kind": kind, **data, **({"job_id": job_id} if job_id is not None else {})})
    except CommandError as exc:
        return Undecodable(kind, job_id, str(exc))


def to_json(command: Command) -> dict[str, object]:
    """A command as one JSON object, its kind included."""
    return {"kind": command.kind, **command.to_json()}


def from_json(data: Fields) -> Command:
    """The command a JSON object (:func:`to_json`) holds; CommandError says why there is none."""
    kind = data.get("kind")
    command_type = BY_KIND.get(kind) if isinstance(kind, str) else None
    if command_type is None:
        raise CommandError(f"unknown command {kind!r}")
    return command_type.from_json(data)


# ---------------------------------------------------------------------- a sent command and its answer
@dataclass(frozen=True)
class CommandRow:
    """A command a front end sent and, once the engine handled it, its answer."""

    id: int
    run_id: int
    command: Command | Undecodable
    status: Status = "pending"
    result: str = ""
    ts: float = 0.0
    handled: float | None = None

    @property
    def kind(self) -> str:
        return self.command.kind

    @property
    def job_id(self) -> int | None:
        return job_of(self.command)

    @property
    def answered(self) -> bool:
        return self.status != "pending"


# ---------------------------------------------------------------------- reading fields
def _only(command_type: type[Command | _NoFields], data: Fields, *names: str) -> Fields:
    """``data``, once it holds no field but ``names`` (and its kind): a field this LAT does not
    know (a newer front end's) is refused, never ignored."""
    unknown = sorted(set(data) - {"kind", *names})
    if unknown:
        raise CommandError(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for {command_type.kind}")
    return data


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _job_id(data: Fields) -> int:
    job_id = data.get("job_id")
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        raise CommandError(f"expected the id of a job, got {job_id!r}")
    return job_id


def _start(data: Fields) -> Start | None:
    start = data.get("start")
    for known in STARTS:
        if start == known:
            return known
    if start is None:
        return None
    raise CommandError(f"unknown requeue start {start!r} (expected one of {', '.join(STARTS)})")


def _text(data: Fields, name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise CommandError(f"{name} must be a string, got {_short(value)}")
    return value


def _short(value: object, limit: int = 200) -> str:
    """A field's value in an answer, cut so that a huge bad row gives a short message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + " ..."
