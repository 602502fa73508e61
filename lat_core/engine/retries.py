"""Automatic retries the plan opted into: OOM-killed jobs with a remedy (``on_oom:``), transient
failures as they are (``on_failure:``).

    on_oom:
      remedies: [expandable_segments, smaller_micro_batch, gradient_checkpointing]
      max_retries: 2
    on_failure:
      classes: [rendezvous, nccl]
      max_retries: 2
      backoff_s: 30

An OOM retry applies the first listed remedy that triage offers for this failure and that this job
has not had yet; a smaller micro-batch raises gradient accumulation so the effective batch, and so
the results, stay comparable. A failure-class retry waits ``backoff_s`` (the job stays queued with
a not-before time that admission honours) and resumes from the job's last checkpoint when it has
one. A job that saved when warned of its time limit (Slurm's ``--signal``, see
:mod:`lat_core.train.save_request`) is resubmitted to resume without being asked. Every retry is
recorded in the job's history.
"""

from __future__ import annotations

import time

from lat_core.contract.jobdir import JobDir
from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME
from lat_core.engine.remedy import Target, apply_change, apply_remedy
from lat_core.engine.requeue import waiting_step
from lat_core.contract.rows import JobRow, RunRow
from lat_core.contract.states import HistoryKind, JobState
from lat_core.contract.journal import Store
from lat_core.contract.failure_classes import OOM_CLASSES
from lat_core.contract.diagnosis import Resume

TAG = "auto-retry with remedy "
FAILURE_TAG = "auto-retry after "
SAVED_TAG = "saved at step "


def maybe_retry(store: Store, run: RunRow, job: JobRow, now: float | None = None) -> bool:
    """Requeue a failed ``job`` when the plan asks for it, or when it saved to be resumed; True
    when requeued."""
    return (_resume_after_save(store, run, job) or _retry_oom(store, run, job)
            or _retry_failure_class(store, run, job, time.time() if now is None else now))


def _resume_after_save(store: Store, run: RunRow, job: JobRow) -> bool:
    """A job that saved a checkpoint when warned of its time limit and stopped (exit
    EXIT_SAVED_TO_RESUME) goes back to the queue to resume from it, with no limit on how often:
    only while each time limit leaves a later checkpoint than the one it resumed from, so a job
    that cannot make a step within its time limit ends failed instead of looping."""
    if job.returncode != EXIT_SAVED_TO_RESUME:
        return False
    latest = JobDir(job.job_dir).latest_checkpoint()
    step = latest[0] if latest is not None else None
    before = _last_saved_step(store, job)
    if step is None or (before is not None and step <= before):
        store.add_transition(run.id, job.id, HistoryKind.AUTO_RETRY,
                             f"not resubmitted: no checkpoint past step {before} after its time limit")
        return False
    apply_change(Target(store, run, job), Resume())
    store.set_job_state(job.id, JobState.QUEUED, f"{SAVED_TAG}{step} before its time limit: resubmitted to resume",
                        ended=None, returncode=None)
    return True


def _last_saved_step(store: Store, job: JobRow) -> int | None:
    steps = [int(t.detail[len(SAVED_TAG):].split()[0]) for t in store.transitions(job.run_id, job_id=job.id)
             if t.new_state == JobState.QUEUED and t.detail.startswith(SAVED_TAG)]
    return steps[-1] if steps else None


def backoff_hold(job: JobRow, now: float) -> str | None:
    """Why admission holds ``job`` back for a retry's backoff, or None once it may start."""
    if job.not_before <= now:
        return None
    return f"retry backoff: {job.not_before - now:.0f}s left"


def _retry_oom(store: Store, run: RunRow, job: JobRow) -> bool:
    settings = run.plan.on_oom
    if settings is None or job.diagnosis is None or job.diagnosis.cls not in OOM_CLASSES:
        return False
    used = _remedies_used(store, job)
    if len(used) >= settings.max_retries:
        return False
    offered = [r.key for r in job.diagnosis.remedies]
    choice = next((k for k in settings.remedies if k in offered and k not in used), None)
    if choice is None:
        return False
    try:
        applied = apply_remedy(store, run, job, choice)
    except ValueError as exc:  # the remedy cannot act on this job: it stays failed, the history says why
        store.add_transition(run.id, job.id, HistoryKind.AUTO_RETRY, f"not retried: {exc}")
        return False
    store.set_job_state(job.id, JobState.QUEUED, f"{TAG}{choice}: {applied}", ended=None, returncode=None,
                        last_step=_waiting_step(store, job), last_loss=None)
    return True


def _retry_failure_class(store: Store, run: RunRow, job: JobRow, now: float) -> bool:
    settings = run.plan.on_failure
    cls = job.diagnosis.cls if job.diagnosis else None
    if settings is None or cls not in settings.classes:
        return False
    done = _failure_retries(store, job)
    limit = settings.max_retries
    if done >= limit:
        return False
    backoff = settings.backoff_s
    how = "from the start"
    if _has_checkpoint(job):
        apply_change(Target(store, run, job), Resume())
        how = "resuming from its last checkpoint"
    store.set_job_state(job.id, JobState.QUEUED, f"{FAILURE_TAG}{cls} ({done + 1}/{limit}): in {backoff:g}s, {how}",
                        ended=None, returncode=None, not_before=now + backoff,
                        last_step=_waiting_step(store, job), last_loss=None)
    return True


def _waiting_step(store: Store, job: JobRow) -> int | None:
    """The row's step while the retry waits, for the argv the retry starts with (a remedy may have
    changed it)."""
    return waiting_step(store.job(job.id).argv, job.job_dir)


def _has_checkpoint(job: JobRow) -> bool:
    return JobDir(job.job_dir).latest_checkpoint() is not None


def _failure_retries(store: Store, job: JobRow) -> int:
    return sum(1 for t in store.transitions(job.run_id, job_id=job.id)
               if t.new_state == JobState.QUEUED and t.detail.startswith(FAILURE_TAG))


def _remedies_used(store: Store, job: JobRow) -> list[str]:
    details = [t.detail for t in store.transitions(job.run_id, job_id=job.id) if t.new_state == JobState.QUEUED]
    return [d[len(TAG):].split(":")[0] for d in details if d.startswith(TAG)]
