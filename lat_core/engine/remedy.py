"""Apply a triage remedy to a job before it is requeued.

A remedy's patch uses three kinds of keys (see :mod:`lat_core.triage.remedies`): dotted lower-case
keys are job-config fields (rewritten in the job's ``job.yaml``), UPPER_CASE keys are environment
variables (added to the job's env), and ``plan.*`` keys act on the run: ``plan.slots_delta`` changes
the slot count of the device the job failed on, ``plan.resume`` restarts from the last checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lat_core.store import JobRow, RunRow, Store


def find_remedy(job: JobRow, key: str) -> dict:
    remedies = (job.diagnosis or {}).get("remedies", [])
    match = next((r for r in remedies if r["key"] == key), None)
    if match is None:
        offered = ", ".join(r["key"] for r in remedies) or "none"
        raise ValueError(f"remedy {key!r} is not offered for {job.key} (offered: {offered})")
    return match


def apply_remedy(store: Store, run: RunRow, job: JobRow, key: str) -> str:
    """Apply the remedy's patch; returns a short description of what changed."""
    patch = find_remedy(job, key)["patch"]
    config = {k: v for k, v in patch.items() if not k.startswith("plan.") and not k.isupper()}
    env = {k: str(v) for k, v in patch.items() if k.isupper()}
    if config:
        _patch_job_yaml(Path(job.job_dir) / "job.yaml", config)
    if env:
        store.set_job_env(job.id, {**job.env, **env})
    if patch.get("plan.resume"):
        store.set_job_argv(job.id, [a for a in job.argv if a != "--overwrite"] + ["--resume"] * ("--resume" not in job.argv))
    if "plan.slots_delta" in patch and job.device:
        _change_slots(store, run, job.device, int(patch["plan.slots_delta"]))
    return ", ".join(f"{k}={v}" for k, v in patch.items())


def _patch_job_yaml(path: Path, fields: dict) -> None:
    config = yaml.safe_load(path.read_text())
    for dotted, value in fields.items():
        node = config
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(path)


def _change_slots(store: Store, run: RunRow, device_id: str, delta: int) -> None:
    store.set_devices(run.id, [d.with_slots(max(1, d.slots + delta)) if d.id == device_id else d
                               for d in run.devices])
