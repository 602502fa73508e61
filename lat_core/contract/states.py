"""Job and run states: str-valued Enums, so the journal keeps its text and front ends may compare
with plain strings, while the core handles every state by name."""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def final(self) -> bool:
        return self in JOB_FINAL


class RunState(str, Enum):
    COUNTDOWN = "countdown"
    RUNNING = "running"
    CANCELLING = "cancelling"
    FINISHED = "finished"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def active(self) -> bool:
        return self in RUN_ACTIVE


JOB_FINAL = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
JOB_UNFINISHED = (JobState.FAILED, JobState.CANCELLED)  # what `requeue --failed` runs again
RUN_ACTIVE = (RunState.COUNTDOWN, RunState.RUNNING, RunState.CANCELLING)
RUN_ENDED = (RunState.FINISHED, RunState.CANCELLED)

# History entries of a run (not states): a tick of the run failed, and it passed again
ENGINE_ERROR = "engine error"
ENGINE_RECOVERED = "engine recovered"
