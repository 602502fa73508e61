"""Notices of a run's life (start, finish or interruption, each failure, each OOM, a pause by the
circuit breaker), sent by the engine.

Each notice is recorded in the journal first (a ``notice:<kind>`` transition), which makes it
idempotent across engine restarts, and then sent on a daemon thread so a slow SMTP server never
stalls admission. A failed send is logged, never fatal.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from lat_core.notify import Notices
from lat_core.titles import job_title
from lat_core.contract.run_secrets import RunSecrets
from lat_core.contract.states import HistoryKind, JobState, RunState, history_entry
from lat_core.contract.journal import JobRow, RunRow, Store
from lat_core.contract.failure_classes import OOM_CLASSES

log = logging.getLogger(__name__)
FLUSH_TIMEOUT_S = 30.0  # a notifier's own timeout is 10 s; a few notices may be in flight at once


class RunNotices:
    def __init__(self, store: Store, environ=None, secrets_of=None):
        self.store = store
        self._environ = dict(os.environ if environ is None else environ)
        self._secrets_of = secrets_of or (lambda run_id: RunSecrets())  # the run's settings in clear
        self._by_run: dict[int, Notices] = {}
        self._sent: set[tuple[int, int | None, str]] = set()
        self._sending: list[threading.Thread] = []

    def _notices(self, run: RunRow) -> Notices:
        if run.id not in self._by_run:
            secrets = self._secrets_of(run.id)
            notify = secrets.notify or run.plan.notify
            self._by_run[run.id] = Notices.from_config(notify, {**self._environ, **secrets.notify_env})
        return self._by_run[run.id]

    def run_started(self, run: RunRow) -> None:
        if not self._may_send(run, None, "start"):
            return  # called every tick: the jobs are counted only when the notice may go out
        n = sum(self.store.job_counts(run.id).values())
        self._emit(run, None, "start", f"LAT run {run.id} started: {n} jobs",
                   f"Run {run.id} started with {n} jobs; outputs in {run.output_root}.")

    def run_finished(self, run: RunRow) -> None:
        """``finish`` for a run that drained, ``interrupt`` for one that was cancelled (the old
        scripts' SWANLAB_EMAIL_ON_INTERRUPT: training stopped before its end)."""
        jobs = self.store.jobs(run.id)
        bad = [j for j in jobs if j.state is not JobState.SUCCEEDED]
        lines = [f"{j.state}: {j.id} {job_title(j)}  {j.error or ''}".rstrip() for j in bad]
        kind, verb = ("interrupt", "interrupted (cancelled)") if run.state is RunState.CANCELLED else ("finish", "finished")
        self._emit(run, None, kind, f"LAT run {run.id} {verb}: {len(jobs) - len(bad)}/{len(jobs)} succeeded",
                   "\n".join([f"Run {run.id} {verb}; outputs in {run.output_root}.", *lines]))

    def run_paused(self, run: RunRow, reason: str) -> None:
        """The engine paused the run's admission by itself (the circuit breaker): a person must
        resume or cancel it, so it is news at once, not at the run's end."""
        self._emit(run, None, "paused", f"LAT run {run.id} paused: its first jobs all failed alike",
                   f"Run {run.id}'s admission is paused: {reason}.\nOutputs in {run.output_root}.")

    def job_failed(self, run: RunRow, job: JobRow) -> None:
        kind = "oom" if job.diagnosis and job.diagnosis.cls in OOM_CLASSES else "failure"
        explained = job.diagnosis.diagnosis if job.diagnosis else ""
        name = job_title(job)
        body = "\n".join([f"job {job.id} {name} failed in run {run.id}: {job.error}", "", explained])
        self._emit(run, job.id, kind, f"LAT job failed: {name}", body.strip())

    def _emit(self, run: RunRow, job_id: int | None, kind: str, subject: str, body: str) -> None:
        notices = self._notices(run)
        if not notices.notifiers or kind not in notices.on or self._already_sent(run.id, job_id, kind):
            return
        self.store.add_transition(run.id, job_id, HistoryKind.NOTICE, subject, about=kind)
        thread = threading.Thread(target=notices.emit, args=(kind, subject, body), daemon=True)
        thread.start()
        self._sending = [t for t in self._sending if t.is_alive()] + [thread]

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Wait (bounded) for notices still being sent: the engine exits right after a run's last
        notice, and a daemon thread dies with it, mail unsent."""
        deadline = time.monotonic() + timeout_s
        for thread in self._sending:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._sending = [t for t in self._sending if t.is_alive()]

    def _may_send(self, run: RunRow, job_id: int | None, kind: str) -> bool:
        notices = self._notices(run)
        return bool(notices.notifiers) and kind in notices.on and (run.id, job_id, kind) not in self._sent

    def _already_sent(self, run_id: int, job_id: int | None, kind: str) -> bool:
        key = (run_id, job_id, kind)
        if key in self._sent:
            return True
        self._sent.add(key)
        history = self.store.transitions(run_id, job_id=job_id) if job_id else self.store.transitions(run_id)
        attempts = self.store.job(job_id).attempts if job_id else 0
        sent = [t for t in history if t.new_state == history_entry(HistoryKind.NOTICE, kind)]
        # a job notice is per attempt: a requeued job that fails again is news again
        return len(sent) >= max(1, attempts) if job_id else bool(sent)
