"""A plan's ``gpus`` + ``slots`` resolved into the run's devices, against what NVML sees here; a
Slurm plan's into the cluster's one device, without NVML (a login node has no GPU).

GPUs are addressed by UUID in ``CUDA_VISIBLE_DEVICES`` (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) when
NVML knows them, so NVML's and CUDA's numbering can never disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lat_core.config.slurm_options import spread_problem, validate_options
from lat_core.contract.devices import Device, cluster_device, cpu_device
from lat_core.errors import GpuError, PlanError

if TYPE_CHECKING:
    from lat_core.front.jobs import JobSpec
    from lat_core.front.plan import Plan
    from lat_core.monitor.gpu import GpuInfo, GpuSnapshot


def resolve_devices(plan: Plan, snapshot: GpuSnapshot) -> list[Device]:
    """One Device per plan device: id (shown), slots, and the env that pins a job to it."""
    if plan.backend == "slurm":
        return [slurm_device(plan)]
    slots = plan.slot_plan()
    if plan.gpus == "cpu":
        return [cpu_device(slots[0])]
    if not snapshot.available:
        raise GpuError(f"the plan names GPUs {plan.gpus} but {snapshot.reason}; use 'gpus: cpu' on this machine")
    gpus = [snapshot.by_index(g) for g in plan.gpus]
    missing = [g for g, gpu in zip(plan.gpus, gpus) if gpu is None]
    if missing:
        have = ", ".join(str(g.index) for g in snapshot.gpus)
        raise GpuError(f"GPU {missing[0]} does not exist (this machine has GPUs {have})", where="plan field 'gpus'")
    return [_gpu_device(gpu, n) for gpu, n in zip(gpus, slots) if gpu is not None]


def slurm_device(plan: Plan) -> Device:
    """``slurm.max_jobs`` jobs in Slurm at once; GPU jobs unless ``slurm.gres: none`` (each job then
    asks Slurm for its GPUs by its world size). The plan's ``gpus`` names this host's GPUs and has
    no say here (:func:`lat_core.front.plan.slurm_plan_problems` refuses a list of them)."""
    options = validate_options(plan.slurm, where="plan field 'slurm'")
    return cluster_device(options.max_jobs, gpus=options.gres != "none")


def check_spread(plan: Plan, jobs: list[JobSpec]) -> None:
    """Every job of a multi-node Slurm plan (``slurm.nodes``) puts the same number of processes on
    each node, a config's own ``gpus_per_job`` included; the first few that cannot are named."""
    nodes = validate_options(plan.slurm, where="plan field 'slurm'").nodes if plan.backend == "slurm" else 1
    problems = [f"job {job.key} ({job.config_path}): {problem}" for job in jobs
                if job.mode != "done" and (problem := spread_problem(job.world, nodes))]
    if problems:
        raise PlanError(problems[:5] + ([f"... and {len(problems) - 5} more"] if len(problems) > 5 else []))


def _gpu_device(gpu: GpuInfo, slots: int) -> Device:
    visible = gpu.uuid or str(gpu.index)
    return Device(id=f"gpu{gpu.index}", label=f"GPU {gpu.index} {gpu.name}", slots=slots,
                  env={"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                  index=gpu.index, uuid=gpu.uuid)
