"""Immutable rows read from the journal (see :mod:`lat_core.store`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from lat_core.states import JobState, RunState


@dataclass(frozen=True)
class RunRow:
    id: int
    created: float
    state: RunState
    plan_yaml: str
    output_root: str
    devices: list
    countdown_until: float
    started: float | None
    ended: float | None
    paused: bool

    def __post_init__(self):
        object.__setattr__(self, "state", RunState(self.state))  # typed however the row was built


@dataclass(frozen=True)
class JobRow:
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
    argv: list
    env: dict
    state: JobState
    device: str | None
    attempts: int
    started: float | None
    ended: float | None
    returncode: int | None
    last_step: int | None
    last_loss: float | None
    error: str | None
    diagnosis: dict | None = None
    rss: int | None = None
    gpu_mem: int | None = None
    peak_rss: int | None = None
    peak_gpu: int | None = None
    waiting: str | None = None
    world: int = 1  # processes (GPUs) the job runs with; > 1 means torchrun
    use_libuv: int = 1
    added: float | None = None  # when the journal got the job: older records in its folder are not its own

    def __post_init__(self):
        object.__setattr__(self, "state", JobState(self.state))  # typed however the row was built

    @property
    def profile_key(self) -> str:
        """Jobs of one config on one dataset need about the same memory, whatever the seed."""
        return f"{self.suite}/{self.stem.split('__rep')[0]}|{self.dataset}"

    def elapsed(self, now: float | None = None) -> float | None:
        if self.started is None:
            return None
        return (self.ended or now or time.time()) - self.started


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


def run_row(row) -> RunRow:
    """A ``runs`` row (sqlite3.Row) with its JSON columns decoded."""
    data = dict(row)
    data["devices"] = json.loads(data.pop("devices_json"))
    data["paused"] = bool(data["paused"])
    return RunRow(**data)


def job_row(row) -> JobRow:
    """A ``jobs`` row (sqlite3.Row) with its JSON columns decoded."""
    data = dict(row)
    data["argv"] = json.loads(data.pop("argv_json"))
    data["env"] = json.loads(data.pop("env_json"))
    diagnosis = data.pop("diagnosis_json")
    data["diagnosis"] = json.loads(diagnosis) if diagnosis else None
    return JobRow(**data)
