"""What front ends call: state directory, starting runs, the detached engine, commands.

Everything that can fail (plan validation, unknown suite, missing GPU, unwritable output root,
config errors) is checked before the run is written to the journal, so nothing starts half-way.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lat_core.config.env import MASK, mask_env, shell_overrides
from lat_core.config.suites import SuiteRegistry
from lat_core.contract.devices import Device
from lat_core.front.devices import check_spread, resolve_devices
from lat_core.errors import JournalError, OutputPathError, PlanError
from lat_core.monitor.gpu import GpuProbe, GpuSnapshot
from lat_core.monitor.host import host_snapshot
from lat_core.contract.journal_faults import check_space, clear_fault, explain, journal_faults, read_fault
from lat_core.contract.run_secrets import SecretFile, collect, create_private
from lat_core.front.run_guard import check_no_live_overlap, creation_lock
from lat_core.safe_files import check_state_dir, prepare_output_root
from lat_core.titles import display_name
from lat_core.contract.states import JobState
from lat_core.contract.journal import Store
from lat_core.contract.rows import RunRow
from lat_core.contract.state_dir import JOURNAL_NAME, EngineLock, default_state_dir, open_store  # noqa: F401  (front ends' names)

if TYPE_CHECKING:  # the plan and job expansion load pydantic: front ends that only read state never need them
    from lat_core.front.jobs import JobSpec
    from lat_core.front.plan import Plan
    from lat_core.front.preflight import HubProbe


@dataclass(frozen=True)
class PreparedRun:
    plan: Plan
    jobs: list[JobSpec]
    devices: list[Device]


def prepare_run(plan: Plan, *, registry: SuiteRegistry | None = None, probe: GpuProbe | None = None,
                environ: dict[str, str] | None = None, hub_probe: HubProbe | None = None) -> PreparedRun:
    """Resolve devices, expand jobs and run the preflight without touching the journal or the disk
    (``hub_probe``: whether the hub answers; tests pass their own)."""
    from lat_core.front.jobs import expand

    registry = plan.suite_registry(registry)
    environ = dict(os.environ if environ is None else environ)
    plan = with_shell_notices(plan, environ)
    gpus = _local_gpus(plan, probe)
    devices = resolve_devices(plan, gpus)
    jobs = expand(plan, registry, shell_overrides(environ))
    _check_placeable(jobs, devices)
    preflight_jobs(plan, jobs, devices, gpus, environ, hub_probe)
    prepare_output_root(Path(plan.output_root))
    return PreparedRun(plan, jobs, devices)


def _local_gpus(plan: Plan, probe: GpuProbe | None) -> GpuSnapshot:
    """NVML's view of this host; none for a Slurm plan, whose jobs run on the cluster's nodes (a
    login node has no GPU, and its driver says nothing about theirs)."""
    if plan.backend == "slurm":
        return GpuSnapshot((), reason="the jobs run on Slurm's nodes")
    return (probe or GpuProbe()).snapshot()


def preflight_jobs(plan: Plan, jobs: list[JobSpec], devices: list[Device], gpus: GpuSnapshot,
                   environ: Mapping[str, str], hub_probe: HubProbe | None = None) -> None:
    """What cannot work, refused before anything is written (lat_core.front.preflight): a new run,
    a rerun, jobs added to a live run. A job that already succeeded is not run again, so it is not
    checked."""
    from lat_core.front import preflight

    check_spread(plan, jobs)
    # a Slurm job's host is a cluster node, not this one: its RAM is the cluster's to judge
    host_ram = host_snapshot().ram_total if plan.backend == "local" else 0
    target = preflight.Target(devices, gpus, host_ram, plan.allow_cpu)
    checked = [preflight.Job(display_name(j.typed.model.family, j.stem, j.seed, j.dataset),  # the tables' name
                             j.typed, {**environ, **j.env})
               for j in jobs if j.typed is not None and j.mode != "done"]
    preflight.check(checked, target, hub_probe)


def with_shell_notices(plan: Plan, environ: dict[str, str]) -> Plan:
    """The plan with the old trainer's e-mail notices (SWANLAB_EMAIL_YAML, SWANLAB_EMAIL_ON_*) of its
    env and the launching shell in its ``notify:``, checked as the engine will build them, so a bad
    file or value stops the run before anything starts."""
    from lat_core.config.email_yaml import with_env_notices
    from lat_core.config.env import EnvValueError
    from lat_core.notify import Notices

    merged = {**plan.env, **environ}
    try:
        notify = with_env_notices(plan.notify, merged)
    except EnvValueError as exc:
        raise PlanError([str(exc)], where="plan env" if exc.name in plan.env and exc.name not in environ
                        else "the launching shell") from None
    if notify == plan.notify:
        return plan
    Notices.from_config(notify, merged)  # NoticeError (a LatError) naming the field
    return plan.model_copy(update={"notify": notify})


def _check_placeable(jobs: list[JobSpec], devices: list[Device]) -> None:
    """A job that needs more GPUs (or CPU slots) than the plan offers could never start."""
    if any(d.is_cluster for d in devices):
        return  # Slurm judges a job's request against its nodes (sbatch refuses one no node can hold)
    gpus = sum(1 for d in devices if not d.is_cpu and d.slots > 0)
    cpu_slots = sum(d.slots for d in devices if d.is_cpu)
    capacity = cpu_slots if cpu_slots else gpus
    what = "CPU slots" if cpu_slots else "GPUs with slots"
    problems = [f"job {j.key} needs {j.world} processes but the plan has {capacity} {what}"
                for j in jobs if j.world > capacity]
    if problems:
        raise PlanError(problems[:5] + ([f"... and {len(problems) - 5} more"] if len(problems) > 5 else []),
                        where="plan field 'gpus_per_job'")


def create_run(store: Store, prepared: PreparedRun, *, now: float | None = None,
               environ: dict[str, str] | None = None) -> int:
    """Write job directories, then the run and its jobs into the journal, and its secrets into the
    state directory's 0600 secrets file; returns the run id. RunConflictError, with nothing
    written, when a live run owns any of the job folders."""
    secrets = collect([job.env for job in prepared.jobs], prepared.plan.notify,
                      os.environ if environ is None else environ)
    with creation_lock(store.path.parent), journal_faults(store.path):
        store.check_writable()
        _check_after_ids(store, prepared.plan.after)
        check_no_live_overlap(store, [job.job_dir for job in prepared.jobs])
        run_id = _write_run(store, prepared, now)
        SecretFile(store.path.parent).save(run_id, secrets)
        return run_id


def _check_after_ids(store: Store, after: list[int]) -> None:
    """The jobs a plan waits for (``after:``, ``--after``) must be in this state directory's journal."""
    missing = sorted(set(after) - set(store.job_states(after)))
    if missing:
        raise PlanError([f"field 'after': no job {missing[0]} in this state directory's journal"
                         + (f" (nor {', '.join(map(str, missing[1:4]))})" if len(missing) > 1 else "")],
                        where=str(store.path))


def _write_run(store: Store, prepared: PreparedRun, now: float | None) -> int:
    for job in prepared.jobs:
        if job.mode != "done":  # a finished job's folder is its record: leave it untouched
            _materialize(job)
    now = time.time() if now is None else now
    countdown_until = now + prepared.plan.countdown_minutes * 60
    root = str(Path(prepared.plan.output_root).expanduser().resolve())
    run_id = store.create_run(prepared.plan.to_yaml(), root, prepared.devices, countdown_until)
    store.add_jobs(run_id, [job_record(j) for j in prepared.jobs])
    return run_id


def _materialize(job: JobSpec) -> None:
    """The job's folder, or an OutputPathError naming it (a full or read-only output root)."""
    from lat_core.front.jobs import materialize

    try:
        materialize(job)
    except (OSError, OutputPathError) as exc:
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if not isinstance(cause, OSError):
            raise
        fault = explain(cause, job.job_dir)
        raise OutputPathError(f"cannot write the job folder: {fault.message}", where=str(job.job_dir)) from exc


def job_record(job: JobSpec) -> dict[str, object]:
    """The journal's view of a job: secrets in its env masked."""
    return {
        "key": job.key, "suite": job.suite, "round": job.round, "stem": job.stem, "seed": job.seed,
        "dataset": job.dataset, "job_dir": str(job.job_dir), "argv": job.command(), "env": mask_env(job.env),
        "state": JobState.SUCCEEDED if job.mode == "done" else JobState.QUEUED,
        "world": job.world, "use_libuv": job.use_libuv, "family": _model_family(job),
        **({"after_keys": job.after_keys} if job.after_keys else {}),
        **({"after_ids": job.after_ids} if job.after_ids else {}),
        **({"sweep": job.sweep} if job.sweep else {}),
    }


def _model_family(job: JobSpec) -> str | None:
    """The family the trainer will build (the typed config's, defaults applied), kept in the
    journal so a table names the model without reading 10,000 job.yaml files."""
    if job.typed is not None:
        return job.typed.model.family
    family = (job.config.get("model") or {}).get("family")
    return family if isinstance(family, str) else None


@dataclass(frozen=True)
class AddChecks:
    """How jobs added to a live run are preflighted: ``allow_cpu`` (``add --allow-cpu``; the run's
    own plan may already say it), and the GPUs, environment and hub as seen from here (tests pass
    their own). The environment is the adder's shell, as a new run's is its launcher's."""
    allow_cpu: bool = False
    probe: GpuProbe | None = None
    environ: Mapping[str, str] | None = None
    hub_probe: HubProbe | None = None


def jobs_to_add(run: RunRow, suites: list[str], rounds: object, pairs: object, registry: SuiteRegistry,
                state_dir: Path | None = None, after: object = None, checks: AddChecks | None = None,
                ) -> list[dict[str, object]]:
    """Journal records for more suites/pairs in a live run, expanded against the run's own plan
    (same GPUs, env, output root) and with their directories written; PlanError when invalid,
    PreflightError when they cannot work on the run's devices (``checks``: how they are checked).
    ``rounds``, ``pairs`` and ``after`` (jobs they wait for, besides those the run's plan names) are
    as a user gave them (checked as a plan's fields).
    With ``state_dir``, RunConflictError (nothing written) when a live run, this one included,
    already owns one of their folders: writing its job.yaml would change a running job's config."""
    from lat_core.front.jobs import expand
    from lat_core.front.plan import plan_from_mapping

    if run.plan.problem:
        raise PlanError([f"the run's saved plan is damaged: {run.plan.problem}"], where=f"run {run.id}")
    data = run.plan.mapping()
    data["suites"] = [{"name": n, "rounds": rounds} for n in suites]
    data["pairs"] = pairs
    plan = plan_from_mapping({**data, "after": after} if after else data, registry, where="jobs to add")
    if after:  # besides those every job of the run waits for
        plan.after = [*run.plan.after, *(a for a in plan.after if a not in run.plan.after)]
    checks = checks or AddChecks()
    if checks.allow_cpu:
        plan.allow_cpu = True
    jobs = expand(plan, plan.suite_registry(registry))  # the run's own config tree, when it names one
    gpus = _local_gpus(plan, checks.probe)  # a Slurm run's jobs go to the cluster's nodes
    preflight_jobs(plan, jobs, run.devices, gpus, os.environ if checks.environ is None else checks.environ,
                   checks.hub_probe)
    if state_dir is None:
        _materialize_all(jobs)
        return [job_record(j) for j in jobs]
    store = open_store(state_dir)
    try:
        _check_after_ids(store, plan.after)
        with creation_lock(state_dir):
            check_no_live_overlap(store, [job.job_dir for job in jobs])
            _materialize_all(jobs)
    finally:
        store.close()
    return [job_record(j) for j in jobs]


def _materialize_all(jobs: list[JobSpec]) -> None:
    for job in jobs:
        _materialize(job)


# ---------------------------------------------------------------- the detached engine


def spawn_engine(state_dir: Path, extra_env: dict[str, str] | None = None,
                 wait_s: float = 15.0) -> subprocess.Popen[bytes]:
    """Start ``python -m lat_core.engine`` in its own session (it outlives the front end) and wait
    until it holds the engine lock or has exited, so the caller sees a consistent state; the Popen."""
    state_dir.mkdir(parents=True, exist_ok=True)
    # values read back from a saved plan are masked: never hand "***" to the engine as a secret
    env = {**os.environ, **{k: v for k, v in (extra_env or {}).items() if v != MASK}}
    create_private(state_dir / "engine.log")
    with open(state_dir / "engine.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lat_core.engine", "--state-dir", str(state_dir)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, close_fds=True,
        )
    lock, deadline = EngineLock(state_dir), time.time() + wait_s
    while proc.poll() is None and not lock.is_held() and time.time() < deadline:
        time.sleep(0.05)
    return proc


def ensure_engine(state_dir: Path, extra_env: dict[str, str] | None = None) -> bool:
    """Start an engine unless one already holds the lock; True when one was started.

    A second lock (``spawn.lock``) serialises front ends starting at the same moment, so only one
    of them spawns; the other then sees the engine's lock held and attaches."""
    with journal_faults(state_dir / JOURNAL_NAME):
        check_state_dir(state_dir)  # its journal tells the engine what to run
        state_dir.mkdir(parents=True, exist_ok=True)
        with open(state_dir / "spawn.lock", "a+") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            if EngineLock(state_dir).is_held():
                return False
            check_space(state_dir)
            clear_fault(state_dir)
            _raise_if_failed(spawn_engine(state_dir, extra_env), state_dir)
            return True


def _raise_if_failed(proc: subprocess.Popen[bytes], state_dir: Path) -> None:
    """An engine that stopped at once on a journal or disk fault: its message, so the front end
    says why instead of starting engines in a loop."""
    if proc.poll() not in (None, 0):
        fault = read_fault(state_dir) or f"the engine exited with status {proc.returncode}; see {state_dir / 'engine.log'}"
        raise JournalError(f"the engine cannot run: {fault}", where=str(state_dir))
