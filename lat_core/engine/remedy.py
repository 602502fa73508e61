"""Apply a triage remedy to a job before it is requeued: one applier per change kind.

A remedy is a list of typed changes (:mod:`lat_core.contract.diagnosis`). Every kind has exactly one
applier here and :data:`APPLIERS` is the only dispatch, so a kind without an applier is an error
(and a failing test), never a silent no-op. All changes of a remedy are checked before any is
applied, so a rejected remedy leaves the job as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from lat_core.contract.journal import JobRow, RunRow, Store
from lat_core.contract.diagnosis import (AvoidDevice, BackendOption, Change, ConfigChange, Diagnosis, EnvChange, Remedy,
                                         Resume, SlotsChange)
from lat_core.contract.jobdir.names import JOB_YAML
from lat_core.titles import job_title


@dataclass(frozen=True)
class Target:
    """The job a change acts on, read fresh from the journal before each change."""
    store: Store
    run: RunRow
    job: JobRow

    @property
    def device_ids(self) -> list[str]:
        return devices_of(self.job)

    @property
    def backend(self) -> str:
        return self.run.plan.backend


def devices_of(job: JobRow) -> list[str]:
    """The devices the job last ran on (a multi-GPU job's ``gpu0+gpu1`` is two)."""
    return job.device.split("+") if job.device else []


def find_remedy(job: JobRow, key: str) -> Remedy:
    remedies = job.diagnosis.remedies if job.diagnosis else ()
    match = next((r for r in remedies if r.key == key), None)
    if match is None:
        offered = ", ".join(r.key for r in remedies) or "none"
        raise ValueError(f"remedy {key!r} is not offered for job {job.id} {job_title(job)} (offered: {offered})")
    return match


def apply_remedy(store: Store, run: RunRow, job: JobRow, key: str) -> str:
    """Apply every change of the remedy; returns a short description of what changed.
    ValueError (nothing applied) when the remedy is not offered or a change cannot act on this job."""
    remedy = find_remedy(job, key)
    problems = [p for c in remedy.changes if (p := check_change(run, job, c))]
    if problems:
        raise ValueError(f"remedy {key!r} cannot be applied to job {job.id} {job_title(job)}: {'; '.join(problems)}")
    described = []
    for change in remedy.changes:
        described.append(apply_change(Target(store, store.run(run.id), store.job(job.id)), change))
    return ", ".join(described) or "no change (run again as is)"


def apply_change(target: Target, change: Change) -> str:
    """The one place every change kind is applied; returns what it did."""
    applier = APPLIERS.get(type(change))
    if applier is None:
        raise TypeError(f"no applier for remedy change {type(change).__name__}")
    return applier(target, change)


def check_change(run: RunRow, job: JobRow, change: Change) -> str | None:
    """Why ``change`` cannot act on this job now, or None."""
    if isinstance(change, (SlotsChange, AvoidDevice)) and not devices_of(job):
        return f"{change.kind}: the job never ran on a device"
    if isinstance(change, AvoidDevice):
        left = [d for d in run.devices if d.id not in {*devices_of(job), *job.avoid_devices}]
        if len(left) < job.world:
            return f"avoid_device: no other device is left for it in this run ({job.device} is the last)"
    if isinstance(change, BackendOption):
        return _backend_problem(run, change)
    return None


def _backend_problem(run: RunRow, change: BackendOption) -> str | None:
    if run.plan.backend != "slurm":
        return f"backend option {change.name}: this run's backend is {run.plan.backend}, not slurm"
    from lat_core.config.slurm_options import option_problems

    problems = option_problems({change.name: change.value})
    return "; ".join(problems) or None


# ---------------------------------------------------------------- appliers, one per kind
def _set_config(target: Target, change: ConfigChange) -> str:
    path = Path(target.job.job_dir) / JOB_YAML
    config = yaml.safe_load(path.read_text()) or {}
    node = config
    *parents, leaf = change.field.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = change.value
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(path)
    return f"{change.field}={change.value}"


def _set_env(target: Target, change: EnvChange) -> str:
    target.store.set_job_env(target.job.id, {**target.job.env, change.name: change.value})
    return f"{change.name}={change.value}"


def _change_slots(target: Target, change: SlotsChange) -> str:
    devices = [d.with_slots(max(1, d.slots + change.delta)) if d.id in target.device_ids else d
               for d in target.run.devices]
    target.store.set_devices(target.run.id, devices)
    return ", ".join(f"{old.id} slots {old.slots} -> {new.slots}"
                     for old, new in zip(target.run.devices, devices) if old.id in target.device_ids)


def _avoid_device(target: Target, _change: AvoidDevice) -> str:
    target.store.set_job_avoid_devices(target.job.id, [*target.job.avoid_devices, *target.device_ids])
    return f"never on {target.job.device} again"


def _resume(target: Target, _change: Resume) -> str:
    argv = [a for a in target.job.argv if a != "--overwrite"]
    target.store.set_job_argv(target.job.id, argv + ["--resume"] * ("--resume" not in argv))
    return "--resume"


def _set_backend_option(target: Target, change: BackendOption) -> str:
    target.store.set_job_backend_options(target.job.id, {**target.job.backend_options, change.name: change.value})
    return f"{target.backend}.{change.name}={change.value}"


APPLIERS: dict[type, Callable[[Target, Any], str]] = {  # each takes the change of its key's type
    ConfigChange: _set_config, EnvChange: _set_env, SlotsChange: _change_slots, AvoidDevice: _avoid_device,
    Resume: _resume, BackendOption: _set_backend_option,
}


def still_effective(run: RunRow, job: JobRow, diagnosis: Diagnosis) -> Diagnosis:
    """The diagnosis without remedies that would change nothing in the live run (a variable or
    field already set, fewer slots on a device at one, no device left to avoid), so an applied
    remedy is not offered again. A remedy with no change (a plain retry) is always kept."""
    kept = tuple(r for r in diagnosis.remedies if not r.changes or any(would_act(run, job, c) for c in r.changes))
    return diagnosis if kept == diagnosis.remedies else Diagnosis(
        diagnosis.cls, diagnosis.title, diagnosis.diagnosis, kept, diagnosis.numbers, diagnosis.evidence)


def would_act(run: RunRow, job: JobRow, change: Change) -> bool:
    """Whether applying ``change`` now would change anything for this job."""
    if isinstance(change, ConfigChange):
        return _config_value(job, change.field) != change.value
    if isinstance(change, EnvChange):
        return job.env.get(change.name) != change.value
    if isinstance(change, SlotsChange):
        return any(max(1, d.slots + change.delta) != d.slots for d in run.devices if d.id in devices_of(job))
    if isinstance(change, AvoidDevice):
        return bool(set(devices_of(job)) - set(job.avoid_devices)) and check_change(run, job, change) is None
    if isinstance(change, Resume):
        return "--resume" not in job.argv
    if isinstance(change, BackendOption):
        return job.backend_options.get(change.name) != change.value
    raise TypeError(f"no effect check for remedy change {type(change).__name__}")


def _config_value(job: JobRow, dotted: str):
    try:
        node = yaml.safe_load((Path(job.job_dir) / JOB_YAML).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node
