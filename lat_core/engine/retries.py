"""Automatic retry of OOM-killed jobs with remedies the plan opted into (``on_oom:``).

    on_oom:
      remedies: [expandable_segments, smaller_micro_batch, gradient_checkpointing]
      max_retries: 2

Each retry applies the first listed remedy that triage offers for this failure and that this job
has not had yet; a smaller micro-batch raises gradient accumulation so the effective batch, and so
the results, stay comparable. Every retry is recorded in the job's history.
"""

from __future__ import annotations

import yaml

from lat_core.engine.remedy import apply_remedy
from lat_core.rows import JobRow, RunRow
from lat_core.states import JobState
from lat_core.store import Store

OOM_CLASSES = ("cuda_oom", "host_oom")
TAG = "auto-retry with remedy "


def on_oom_settings(run: RunRow) -> dict:
    plan = yaml.safe_load(run.plan_yaml) or {}
    return (plan.get("on_oom") or {}) if isinstance(plan, dict) else {}


def maybe_retry(store: Store, run: RunRow, job: JobRow) -> bool:
    """Requeue ``job`` with the next remedy when the plan asks for it; True when requeued."""
    settings = on_oom_settings(run)
    if not settings or (job.diagnosis or {}).get("class") not in OOM_CLASSES:
        return False
    used = _remedies_used(store, job)
    if len(used) >= int(settings.get("max_retries", 2)):
        return False
    offered = [r["key"] for r in job.diagnosis.get("remedies", [])]
    choice = next((k for k in settings.get("remedies", []) if k in offered and k not in used), None)
    if choice is None:
        return False
    applied = apply_remedy(store, run, job, choice)
    store.set_job_state(job.id, JobState.QUEUED, f"{TAG}{choice}: {applied}", ended=None, returncode=None)
    return True


def _remedies_used(store: Store, job: JobRow) -> list[str]:
    details = [t.detail for t in store.transitions(job.run_id, job_id=job.id) if t.new_state == JobState.QUEUED]
    return [d[len(TAG):].split(":")[0] for d in details if d.startswith(TAG)]
