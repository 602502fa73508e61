"""Job and run states, and the other kinds of history entries: str-valued Enums, so the journal keeps
its text and front ends may compare with plain strings, while the core handles every one by name."""

from __future__ import annotations

from enum import Enum, StrEnum


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PRUNED = "pruned"  # the plan's sweep ended it or never started it: a point behind the others

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


JOB_FINAL = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PRUNED)
# what `requeue --failed` runs again: a pruned point is the sweep's choice, not a failure
JOB_UNFINISHED = (JobState.FAILED, JobState.CANCELLED)
RUN_ACTIVE = (RunState.COUNTDOWN, RunState.RUNNING, RunState.CANCELLING)
RUN_ENDED = (RunState.FINISHED, RunState.CANCELLED)



class HistoryKind(StrEnum):
    """Entries of a run's or a job's history that are not state changes (the journal keeps them
    where a transition keeps its new state). ``NOTICE`` and ``COMMAND`` are written with what they
    are about: ``notice:oom``, ``command:cancel_job`` (:func:`history_entry`)."""
    ENGINE = "engine"  # an engine started for the run
    ENGINE_ERROR = "engine error"  # a tick of the run failed
    ENGINE_RECOVERED = "engine recovered"  # and passed again
    PAUSED = "paused"  # the run's admission, with its reason
    RESUMED = "resumed"
    ADMISSION = "admission"  # why admission let a job in as it did
    WARM_START = "warm start"
    FUSED = "fused"  # a job trains in a fused group
    MPS = "mps"
    RENDEZVOUS = "rendezvous"  # a distributed job's port
    BAD_EVENTS = "bad events"  # lines of events.jsonl that are not events
    RECOVERED = "recovered"  # a job settled after an engine crash
    AUTO_RETRY = "auto-retry"  # a retry the plan asked for, not made
    NOTICE = "notice"
    COMMAND = "command"
    SWEEP = "sweep"  # a two-stage search's ranking: what it promoted and why


def history_entry(kind: HistoryKind, about: str | None = None) -> str:
    """How the journal writes an entry of ``kind``: ``notice:oom`` for a notice about an OOM."""
    return kind.value if about is None else f"{kind.value}:{about}"
