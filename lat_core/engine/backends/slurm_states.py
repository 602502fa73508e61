"""Pure helpers of the Slurm backend: Slurm job states and what they mean for triage.

Nothing here runs a Slurm command, so all of it is tested without a cluster (sacct/squeue output
fixtures in ``tests/fixtures/slurm``).
"""

from __future__ import annotations

import re

from lat_core.config.slurm_options import SlurmOptions, double_mem, time_minutes
from lat_core.contract.failure_classes import FailureClass as F
from lat_core.contract.diagnosis import Diagnosis, Remedy

# Slurm job states in which the job may still start or is still running: the job is "alive".
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "RESV_DEL_HOLD", "SIGNALING", "STAGE_OUT", "STOPPED",
})

# Final Slurm state -> (triage class, title). The runner's exit record says how the trainer ended;
# these say why Slurm ended the job when the runner could not say it itself.
FAILURES = {
    "OUT_OF_MEMORY": (F.HOST_OOM, "Killed by Slurm: over its memory request"),
    "TIMEOUT": (F.TIMEOUT, "Killed by Slurm: ran past its time limit"),
    "DEADLINE": (F.TIMEOUT, "Killed by Slurm: reached its deadline"),
    "CANCELLED": (F.CANCELLED, "Cancelled in Slurm"),
    "REVOKED": (F.CANCELLED, "Revoked by a federated Slurm cluster"),
    "NODE_FAIL": (F.NODE_FAIL, "Its Slurm node failed"),
    "BOOT_FAIL": (F.NODE_FAIL, "Its Slurm node failed to boot"),
    "PREEMPTED": (F.PREEMPTED, "Preempted by a higher-priority Slurm job"),
    "FAILED": (F.EXIT_CODE, "Exited non-zero under Slurm"),
    "COMPLETED": (F.OK, "Completed"),
}


def normalize_state(state: str) -> str:
    """``"CANCELLED by 0"`` / ``"CANCELLED+"`` / ``"cancelled"`` -> ``"CANCELLED"``."""
    word = (state or "").strip().split(" ")[0].rstrip("+").upper()
    return word


def slurm_failure(state: str) -> tuple[F, str]:
    """(triage class, title) for a final Slurm job state; unknown states are a generic exit."""
    word = normalize_state(state)
    return FAILURES.get(word, (F.EXIT_CODE, f"Ended in Slurm state {word or 'unknown'}"))


def is_active(state: str) -> bool:
    return normalize_state(state) in ACTIVE_STATES


def elapsed_seconds(text: str) -> int | None:
    """Slurm's ``[D-]HH:MM:SS`` / ``MM:SS`` (also ``MM:SS.mmm``) in seconds."""
    text = (text or "").strip()
    if not text:
        return None
    days, _, clock = text.rpartition("-")
    try:
        parts = [float(p) for p in clock.split(":")]
        seconds = 0.0
        for part in parts:
            seconds = seconds * 60 + part
        return int(seconds + (int(days) * 86400 if days else 0))
    except ValueError:
        return None


def parse_sacct(text: str, job_id: int | str) -> dict | None:
    """The allocation line of ``sacct -j ID --parsable2 --noheader --format=JobID,State,ExitCode,Elapsed``
    as ``{job_id, state, state_raw, exit_code, signal, elapsed, elapsed_s}``; None when absent."""
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 4 or fields[0] != str(job_id):
            continue
        code, _, sig = fields[2].partition(":")
        return {
            "job_id": int(fields[0]) if fields[0].isdigit() else fields[0],  # "49_2": an array task
            "state": normalize_state(fields[1]),
            "state_raw": fields[1],
            "exit_code": int(code) if code.isdigit() else None,
            "signal": int(sig) if sig.isdigit() else None,
            "elapsed": fields[3],
            "elapsed_s": elapsed_seconds(fields[3]),
        }
    return None


def parse_scontrol_job(text: str, job_id: int | str) -> dict | None:
    """The same record from ``scontrol show job -o ID`` (no accounting database needed)."""
    pairs = dict(re.findall(r"(\w+)=(\S*)", text))
    task = f"{pairs.get('ArrayJobId')}_{pairs.get('ArrayTaskId')}"  # an array task has its own JobId
    if str(job_id) not in (pairs.get("JobId"), task):
        return None
    code, _, sig = pairs.get("ExitCode", "").partition(":")
    return {
        "job_id": int(job_id) if str(job_id).isdigit() else str(job_id), "state": normalize_state(pairs.get("JobState", "")),
        "state_raw": pairs.get("JobState", ""), "exit_code": int(code) if code.isdigit() else None,
        "signal": int(sig) if sig.isdigit() else None, "elapsed": pairs.get("RunTime", ""),
        "elapsed_s": elapsed_seconds(pairs.get("RunTime", "")),
    }


def slurm_diagnosis(final: dict, options: "SlurmOptions | None" = None) -> Diagnosis | None:
    """A triage diagnosis for a job that Slurm itself stopped; None when Slurm's state adds nothing
    (completed, or failed with the trainer's own exit code: the log-based triage explains those)."""
    cls, title = slurm_failure(final.get("state", ""))
    if cls in (F.OK, F.EXIT_CODE):
        return None
    state = final.get("state_raw") or final.get("state")
    text = f"Slurm ended job {final.get('job_id')} in state {state} after {final.get('elapsed') or '?'}."
    return Diagnosis(cls, title, text, _remedies(cls, options, final.get("elapsed_s")),
                     {"slurm_state": final.get("state"), "elapsed_s": final.get("elapsed_s")},
                     (f"sacct: {final.get('job_id')}|{state}|{final.get('exit_code')}:{final.get('signal')}",))


def _remedies(cls: F, options: "SlurmOptions | None", elapsed_s: int | None = None) -> tuple[Remedy, ...]:
    """Slurm limits doubled for this job; where the plan set no limit, the time it ran before
    Slurm stopped it stands for the partition's (an unknown memory limit cannot be doubled)."""
    if cls == F.TIMEOUT:
        now = time_minutes(options.time) if options and options.time else (elapsed_s or 0) // 60
        was = options.time if options and options.time else f"the partition's, about {now} min"
        longer = [Remedy("slurm_time", f"time limit {was} -> {max(2 * now, 1)} min for this job",
                         "longer queue wait", {"plan.slurm.time": str(max(2 * now, 1))})] if now else []
        return (*longer, Remedy("resume", "resume from the last checkpoint", "none", {"plan.resume": True}))
    if cls == F.HOST_OOM and options and options.mem:
        more = double_mem(options.mem)
        return (Remedy("slurm_mem", f"memory request {options.mem} -> {more} for this job", "longer queue wait",
                       {"plan.slurm.mem": more}),)
    if cls in (F.NODE_FAIL, F.PREEMPTED):
        return (Remedy("requeue", "requeue the job (nothing in it was at fault)", "none", {}),)
    return ()
