"""Devices a run schedules on: the ``Device`` type the journal keeps (a plan's ``gpus`` + ``slots``
are resolved into them by :mod:`lat_core.front.devices`).

GPUs are addressed by UUID in ``CUDA_VISIBLE_DEVICES`` (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) when
NVML knows them, so NVML's and CUDA's numbering can never disagree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lat_core.errors import JournalError

CPU_ID = "cpu"
CLUSTER_ID = "slurm"  # a cluster's scheduler: its slots are jobs in its queue, not this host's devices


@dataclass(frozen=True)
class Device:
    """One schedulable device. ``id`` is what jobs and commands name (``cpu``, ``gpu3``, or
    ``gpu0+gpu1`` for a multi-GPU job's merged view); ``env`` pins a job to it."""
    id: str
    label: str
    slots: int
    env: Mapping[str, str] = field(default_factory=dict)
    index: int | None = None
    uuid: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))  # frozen means frozen

    @property
    def is_cpu(self) -> bool:
        return self.id == CPU_ID

    @property
    def is_cluster(self) -> bool:
        """Jobs go to a scheduler (Slurm) that picks their node and GPUs: a job of any world size
        takes one of its slots, and nothing of this host (NVML, RAM, ports) is measured for it."""
        return self.id == CLUSTER_ID

    def with_slots(self, slots: int) -> Device:
        return dataclasses.replace(self, slots=slots)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "slots": self.slots, "env": dict(self.env),
                "index": self.index, "uuid": self.uuid}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "devices") -> Device:
        """The journal's (or a caller's) mapping as a Device; JournalError naming what is wrong."""
        if isinstance(data, Device):
            return data
        try:
            slots, index = data["slots"], data.get("index")
            if not isinstance(slots, int) or (index is not None and not isinstance(index, int)):
                raise TypeError(f"slots {slots!r} / index {index!r} must be integers")
            return cls(id=str(data["id"]), label=str(data.get("label", data["id"])), slots=slots,
                       env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
                       index=index, uuid=data.get("uuid"))
        except (KeyError, TypeError, AttributeError) as exc:
            raise JournalError(f"not a device: {data!r} ({exc})", where=where) from exc


def cpu_device(slots: int) -> Device:
    return Device(CPU_ID, "cpu", slots, {"CUDA_VISIBLE_DEVICES": ""})


def cluster_device(max_jobs: int, *, gpus: bool) -> Device:
    """A Slurm plan's one device: ``max_jobs`` jobs in the queue at once. A GPU job's pin is the
    cluster's (Slurm sets CUDA_VISIBLE_DEVICES for what it allocates); a CPU job sees no GPU."""
    return Device(CLUSTER_ID, f"Slurm ({max_jobs} jobs at once)", max_jobs,
                  {} if gpus else {"CUDA_VISIBLE_DEVICES": ""})
