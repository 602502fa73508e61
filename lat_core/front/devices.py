"""A plan's ``gpus`` + ``slots`` resolved into the run's devices, against what NVML sees here.

GPUs are addressed by UUID in ``CUDA_VISIBLE_DEVICES`` (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) when
NVML knows them, so NVML's and CUDA's numbering can never disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lat_core.contract.devices import Device, cpu_device
from lat_core.errors import GpuError

if TYPE_CHECKING:
    from lat_core.front.plan import Plan
    from lat_core.monitor.gpu import GpuInfo, GpuSnapshot


def resolve_devices(plan: Plan, snapshot: GpuSnapshot) -> list[Device]:
    """One Device per plan device: id (shown), slots, and the env that pins a job to it."""
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


def _gpu_device(gpu: GpuInfo, slots: int) -> Device:
    visible = gpu.uuid or str(gpu.index)
    return Device(id=f"gpu{gpu.index}", label=f"GPU {gpu.index} {gpu.name}", slots=slots,
                  env={"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                  index=gpu.index, uuid=gpu.uuid)
