"""Immutable rows read from the journal (see :mod:`lat_core.contract.journal`)."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lat_core.contract.devices import Device
from lat_core.contract.diagnosis import Diagnosis, DiagnosisError
from lat_core.contract.saved_plan import SavedPlan
from lat_core.contract.states import JobState, RunState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunRow:
    id: int
    created: float
    state: RunState
    plan: SavedPlan  # its text as saved: plan.text
    output_root: str
    devices: list[Device]
    countdown_until: float
    started: float | None
    ended: float | None
    paused: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", RunState(self.state))  # typed however the row was built


@dataclass(frozen=True)
class JobSummary:
    """A job as a table shows it: the journal's plain columns, nothing to decode, so a run of
    10,000 jobs reads in one query (``status``, the TUI's table). Field names are column names, but
    for ``earlier_s``, which the journal computes from the job's attempts in the same query."""
    id: int
    run_id: int
    seq: int
    key: str
    suite: str
    round: int
    stem: str
    seed: int
    dataset: str
    job_dir: str
    state: JobState
    device: str | None
    attempts: int
    started: float | None
    ended: float | None
    returncode: int | None
    last_step: int | None
    last_loss: float | None
    error: str | None
    rss: int | None = None
    gpu_mem: int | None = None
    peak_rss: int | None = None
    peak_gpu: int | None = None
    waiting: str | None = None
    world: int = 1  # processes (GPUs) the job runs with; > 1 means torchrun
    not_before: float = 0.0  # a retry's backoff: admission holds the job until this time
    added: float | None = None  # when the journal got the job: older records in its folder are not its own
    family: str | None = None  # the resolved config's model.family (None: a journal from before it was kept)
    fused_group: str | None = None  # the fused group its current attempt trains in (its usage is the group's)
    # how long its attempts before the latest ran, together (the journal sums them from ``attempts``)
    earlier_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", JobState(self.state))  # typed however the row was built

    @property
    def profile_key(self) -> str:
        """Jobs of one config on one dataset need about the same memory, whatever the seed."""
        return f"{self.suite}/{self.stem.split('__rep')[0]}|{self.dataset}"

    def elapsed(self, now: float | None = None) -> float | None:
        """How long its latest attempt ran (runs)."""
        if self.started is None:
            return None
        return (self.ended or now or time.time()) - self.started

    def time_spent(self, now: float | None = None) -> float | None:
        """How long all its attempts ran, together: the job table's ``time`` (``try`` counts them)."""
        latest = self.elapsed(now)
        return None if latest is None else self.earlier_s + latest


@dataclass(frozen=True, kw_only=True)
class JobRow(JobSummary):
    """A whole job: the summary plus what the engine launches it with and what triage found."""
    argv: list[str]
    env: dict[str, str]
    diagnosis: Diagnosis | None = None  # what triage found when the job last failed
    use_libuv: int = 1
    avoid_devices: tuple[str, ...] = ()  # device ids a remedy excluded for this job (placement skips them)
    backend_options: dict[str, Any] = field(default_factory=dict)  # per-job backend options (Slurm time/mem)
    after: tuple[int, ...] = ()  # ids of the jobs whose success this one waits for (lat_core.engine.dependencies)


SUMMARY_COLUMNS = tuple(f.name for f in fields(JobSummary))  # in order: JobSummary(*row) takes them


@dataclass(frozen=True)
class GroupUsage:
    """A fused group's measured memory: its process tree's, shared by its members (none of it is a
    member's own). ``members``: how many it started with; ``full_*``: its peak while all were in it
    (memory a member held is not given back when it leaves, so later peaks say nothing of fewer)."""
    id: str
    run_id: int
    members: int
    device: str | None
    rss: int | None
    gpu_mem: int | None
    peak_rss: int | None
    peak_gpu: int | None
    full_rss: int | None
    full_gpu: int | None


GROUP_COLUMNS = tuple(f.name for f in fields(GroupUsage))


@dataclass(frozen=True)
class Transition:
    id: int
    ts: float
    run_id: int
    job_id: int | None
    old_state: str | None
    new_state: str
    detail: str


@dataclass(frozen=True)
class AttemptRow:
    id: int
    job_id: int
    n: int
    device: str
    pid: int | None
    pid_start: float | None
    launched: float
    ended: float | None
    returncode: int | None
    exit_path: str
    cancel_at: float | None = None
    oom_source: str | None = None
    oom_before: int | None = None


def run_row(row: sqlite3.Row) -> RunRow:
    """A ``runs`` row (sqlite3.Row) with its JSON columns decoded."""
    data = _known(row, _RUN_FIELDS)
    where = f"runs.devices_json of run {data['id']}"
    data["devices"] = [Device.from_json(d, where=where) for d in json.loads(row["devices_json"])]
    data["paused"] = bool(data["paused"])
    data["plan"] = SavedPlan.from_text(row["plan_yaml"])
    return RunRow(**data)


def job_summary(row: tuple[Any, ...]) -> JobSummary:
    """A row of ``SELECT <SUMMARY_COLUMNS> FROM jobs`` (a plain tuple, in that order)."""
    return JobSummary(*row)


def job_row(row: sqlite3.Row) -> JobRow:
    """A ``jobs`` row (sqlite3.Row) with its JSON columns decoded."""
    columns = dict(zip(row.keys(), row))  # by name once: a sqlite3.Row looks each name up among all its columns
    data = _known(columns, _JOB_FIELDS)
    data["argv"] = json.loads(columns["argv_json"])
    data["env"] = json.loads(columns["env_json"])
    data["avoid_devices"] = tuple(json.loads(columns["avoid_devices_json"]))
    data["backend_options"] = json.loads(columns["backend_options_json"])
    data["after"] = tuple(json.loads(columns.get("after_json") or "[]"))
    data["diagnosis"] = _diagnosis(columns["diagnosis_json"], f"jobs.diagnosis_json of job {data['id']}")
    return JobRow(**data)


def _diagnosis(text: str | None, where: str) -> Diagnosis | None:
    """The job's stored diagnosis. A damaged one (not JSON, or not what ``Diagnosis.to_json``
    writes: a hand edit, a newer LAT's failure class) reads as None, logged once with what is wrong:
    the job's other columns still read (its ``error`` keeps the one-line reason), and the engine,
    which reads jobs every tick, goes on."""
    if not text:
        return None
    try:
        return Diagnosis.from_json(json.loads(text))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and DiagnosisError are ValueErrors
        if (where, hash(text)) not in _TOLD:
            _TOLD.add((where, hash(text)))
            log.warning("%s is damaged, read as no diagnosis: %s", where, _why(exc))
        return None


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, DiagnosisError) else f"not JSON ({type(exc).__name__}: {exc})"


_TOLD: set[tuple[str, int]] = set()  # damaged diagnoses (where, hash of the text) this process logged


def _known(row: Mapping[str, Any] | sqlite3.Row, names: frozenset[str]) -> dict[str, Any]:
    """The row's columns (a sqlite3.Row or a mapping) that are fields of the row type: a journal
    that a newer LAT gave more columns (its schema grows by ``ALTER TABLE ADD COLUMN``) still reads
    here."""
    return {key: row[key] for key in row.keys() if key in names}


_RUN_FIELDS = frozenset(f.name for f in fields(RunRow))
_JOB_FIELDS = frozenset(f.name for f in fields(JobRow))
