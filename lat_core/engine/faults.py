"""How the engine survives what goes wrong: per-run error guards with backoff, per-job guards,
and the job folder's own records for a journal that lost its tail.

A job can fail only itself: whatever the engine cannot handle about one job (its events, its exit,
its triage) fails that job with a readable reason. What fails a whole run's tick (a bug, the
journal busy) is recorded in that run's history as ``engine error`` and retried with backoff.
"""

from __future__ import annotations

import errno
import sqlite3
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeGuard

from lat_core.errors import JournalError
from lat_core.contract.journal_faults import WalLost
from lat_core.contract.jobdir import AttemptFiles, ExitRecord, JobDir, PidRecord
from lat_core.contract.rows import JobRow
from lat_core.contract.states import HistoryKind
from lat_core.contract.journal import Store
from lat_core.contract.failure_classes import FailureClass
from lat_core.contract.diagnosis import Diagnosis

JOURNAL_ERRORS = (sqlite3.Error, JournalError)  # the journal itself: retried, never blamed on a job
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
REASON_CHARS = 300
MTIME_SLACK_S = 1.0  # file times lag time.time() by a clock tick; older runs' records are far older


def engine_must_stop(exc: BaseException) -> bool:
    """A fault no retry mends and every further write makes worse: the engine stops on it."""
    return isinstance(exc, WalLost)


def journal_locked(exc: BaseException) -> bool:
    """Another process holds the journal past the timeout: nobody's fault to record (recording it
    would need the lock too); the engine's process waits it out (lat_core.engine.__main__)."""
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc).lower()


def disk_full(exc: BaseException) -> TypeGuard[OSError]:
    """A write the disk had no room for (or the user's quota): the disk's fault, not the engine's."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full_pause(output_root: str) -> str:
    """The run's one reason while its admission is paused for a full disk."""
    return f"disk full at {output_root}: free space, then `lat-tui resume`"


def disk_full_failure(exc: OSError, output_root: str) -> tuple[str, Diagnosis]:
    """(error, diagnosis) of a job whose files the engine could not write on a full disk."""
    where = f" ({exc.filename})" if exc.filename else ""
    error = f"disk full at {output_root}{where}: free space, then requeue it"
    diagnosis = Diagnosis(FailureClass.DISK_FULL, "Disk full", f"The disk of {output_root} filled up: the engine "
                          f"could not write this job's files{where}. Nothing is wrong with the job; free space "
                          "(`df -h`, `du -sh` on the output root), then requeue it.", evidence=(reason_of(exc),))
    return error, diagnosis


def reason_of(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:REASON_CHARS]


class EngineErrors:
    """Per-run tick guard: a failing tick is told once per distinct reason, then retried after
    1 s, 2 s, 5 s ... 60 s; the first tick that passes again says so."""

    def __init__(self, store: Store, clock: Callable[[], float],
                 on_disk_full: Callable[[int, OSError], None] | None = None):
        self.store = store
        self._clock = clock
        self._on_disk_full = on_disk_full
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._told: dict[int, str] = {}

    def due(self, run_id: int) -> bool:
        return self._clock() >= self._retry_at.get(run_id, 0.0)

    def retry_now(self, run_id: int) -> None:
        self._retry_at.pop(run_id, None)

    @contextmanager
    def guard(self, run_id: int):
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - the engine outlives any one run's failing tick
            if journal_locked(exc) or engine_must_stop(exc):
                raise
            self._failed(run_id, exc)
        else:
            if self._failures.pop(run_id, 0):
                self._retry_at.pop(run_id, None)
                self._told.pop(run_id, None)
                self.store.add_transition(run_id, None, HistoryKind.ENGINE_RECOVERED, "the run is served again")

    def _failed(self, run_id: int, exc: Exception) -> None:
        traceback.print_exc(file=sys.stderr)  # the engine's log keeps the whole traceback
        n = self._failures[run_id] = self._failures.get(run_id, 0) + 1
        delay = BACKOFF_S[min(n, len(BACKOFF_S)) - 1]
        self._retry_at[run_id] = self._clock() + delay
        reason = reason_of(exc)
        if self._told.get(run_id) == reason:
            return
        try:
            self.store.add_transition(run_id, None, HistoryKind.ENGINE_ERROR, f"{reason} (retrying with backoff)")
            self._told[run_id] = reason
        except JOURNAL_ERRORS as again:
            print(f"engine error: {reason}; not recorded: {reason_of(again)}", file=sys.stderr, flush=True)

    @contextmanager
    def job_guard(self, job_id: int, what: str, fail: Callable[[int, str], None]):
        """Whatever goes wrong handling one job (but the journal) fails that job, with ``what``; a
        full disk is told as such (``on_disk_full``), without a traceback: nothing to debug."""
        try:
            yield
        except JOURNAL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - one job's fault fails only that job
            if disk_full(exc) and self._on_disk_full:
                self._on_disk_full(job_id, exc)
                return
            traceback.print_exc(file=sys.stderr)
            fail(job_id, f"{what}: {reason_of(exc)}")


@dataclass(frozen=True)
class LostAttempt:
    """An attempt the job's folder proves ran, that the journal does not know (lost WAL, tail)."""

    attempt: AttemptFiles
    record: ExitRecord | None  # it ended
    pid: PidRecord | None  # it runs (alive) or ran (dead, no exit record)
    finished_at: float | None  # its events end with ``finished``
    alive: bool = False

    @property
    def exit_path(self) -> Path:
        return self.attempt.exit_path

    def describe(self) -> str:
        name = self.attempt.name
        pid = self.pid.pid if self.pid is not None else None  # set where it runs, or ran without a record
        if self.alive:
            return f"adopted {name}, still running as pid {pid}"
        if self.record is not None:
            return f"settled from {name}'s exit record"
        if self.finished_at is not None:
            return "settled from the job's finished event"
        return f"settled: {name} ran (pid {pid}) and left no exit record"

    @property
    def returncode(self) -> int | None:
        if self.record is not None:
            return self.record.returncode
        return 0 if self.finished_at is not None else None


def find_lost_attempt(job: JobRow, since: float,
                      alive: Callable[[int, float | None], bool] | None) -> LostAttempt | None:
    """The newest attempt record in the job's folder written at or after ``since`` (when the journal
    got the job, or its last known attempt ended), or a ``finished`` event after it. ``alive`` checks
    a pid (None where pids are not local, e.g. Slurm: then pid files are not looked at)."""
    folder = JobDir(job.job_dir)
    unknown = [a for a in folder.attempts_on_disk() if (a.number or 0) > job.attempts]
    files_since = since - MTIME_SLACK_S
    for attempt in reversed(unknown):
        record = attempt.read_exit() if _written_since(attempt.exit_path, files_since) else None
        runner = attempt.runner()
        pid_written = alive is not None and _written_since(runner.pid_path, files_since)
        pid = runner.read_pid() if pid_written else None
        if record is not None:
            return LostAttempt(attempt, record, pid, None)
        if pid is not None and alive is not None:  # a pid file is read only where pids are checked
            return LostAttempt(attempt, None, pid, None, alive=alive(pid.pid, pid.pid_start))
    # an event carries the trainer's own clock, no file-time lag: the last known attempt's own
    # `finished` (written just before it ended) must not count as a lost one
    finished = folder.finished_since(since)
    if finished is not None:
        return LostAttempt(folder.attempt(job.attempts + 1), None, None, finished)
    return None


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False
