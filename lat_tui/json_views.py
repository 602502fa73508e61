"""The ``--json`` documents of ``status``, ``runs`` and ``show``: a stable, versioned schema.

Every document has ``"schema": SCHEMA_VERSION``; fields are only ever added within a version. The
field names and types are the dataclasses below (README, "Machine-readable output"); ``from_json``
reads a document back and checks it, so scripts and tests hold the same contract.
"""

from __future__ import annotations

import dataclasses
import json
import time
import types
import typing
from dataclasses import dataclass

from lat_core.contract.rows import GroupUsage, JobSummary, RunRow, Transition
from lat_tui.columns import state_text

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RunView:
    id: int
    state: str
    created: float
    started: float | None
    ended: float | None
    paused: bool
    output_root: str
    devices: list  # [{"id": str, "slots": int}]
    jobs_by_state: dict  # state -> count


@dataclass(frozen=True)
class JobView:
    id: int
    run_id: int
    key: str
    suite: str
    stem: str
    seed: int
    dataset: str
    state: str
    device: str | None
    attempts: int
    started: float | None
    ended: float | None
    elapsed: float | None
    last_step: int | None
    last_loss: float | None
    peak_rss: int | None
    peak_gpu: int | None
    waiting: str | None
    error: str | None
    job_dir: str
    # A fused member's memory is its group's (peak_rss/peak_gpu stay null: no share is made up);
    # all null for a job alone. group_members: how many jobs the group started with.
    group: str | None = None
    group_members: int | None = None
    group_rss: int | None = None
    group_gpu_mem: int | None = None
    group_peak_rss: int | None = None
    group_peak_gpu: int | None = None
    time_spent: float | None = None  # all its attempts together (``elapsed``: the latest one's)


@dataclass(frozen=True)
class EventView:
    ts: float
    state: str
    old_state: str | None
    detail: str


def run_view(run: RunRow, jobs: list[JobSummary]) -> RunView:
    counts: dict[str, int] = {}
    for job in jobs:
        counts[state_text(job.state)] = counts.get(state_text(job.state), 0) + 1
    return RunView(run.id, state_text(run.state), run.created, run.started, run.ended, bool(run.paused), run.output_root,
                   [{"id": d.id, "slots": d.slots} for d in run.devices], counts)


def job_view(job: JobSummary, now: float | None = None, group: GroupUsage | None = None) -> JobView:
    """``group``: the fused group of the job's current attempt, whose figures its row carries."""
    figures = (group.id, group.members, group.rss, group.gpu_mem, group.peak_rss, group.peak_gpu) if group else ()
    now = now or time.time()
    return JobView(job.id, job.run_id, job.key, job.suite, job.stem, job.seed, job.dataset, state_text(job.state),
                   job.device, job.attempts, job.started, job.ended, job.elapsed(now),
                   job.last_step, job.last_loss, job.peak_rss, job.peak_gpu, job.waiting, job.error, job.job_dir,
                   *figures, time_spent=job.time_spent(now))


def event_view(t: Transition) -> EventView:
    return EventView(t.ts, state_text(t.new_state), None if t.old_state is None else state_text(t.old_state), t.detail)


def dumps(document: dict) -> str:
    return json.dumps({"schema": SCHEMA_VERSION, **document}, indent=2, default=_plain)


def _plain(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return state_text(value)  # str-valued enums (job and run states)


def from_json(cls, data: dict):
    """``cls(**data)`` after checking that every field is there with its documented type."""
    hints = typing.get_type_hints(cls)
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in data]
    if missing:
        raise ValueError(f"{cls.__name__}: missing fields {missing}")
    for name, hint in hints.items():
        if not _is_instance(data[name], hint):
            raise ValueError(f"{cls.__name__}.{name}: expected {hint}, got {data[name]!r}")
    return cls(**{name: data[name] for name in hints})


def _is_instance(value, hint) -> bool:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return True
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if option in (int, str, bool, list, dict) and isinstance(value, option) and not (option is int and isinstance(value, bool)):
            return True
    return False
