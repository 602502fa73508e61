"""A fake of the pynvml calls GpuProbe uses, for tests and for demos on machines without GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class FakeNvmlError(Exception):
    pass


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    total: int = 80 * 2**30
    used: int = 0
    util: int = 0
    temperature: int = 40
    processes: list[tuple[int, int]] = field(default_factory=list)  # [(pid, used bytes)]


@dataclass
class FakeNvml:
    gpus: list[FakeGpu] = field(default_factory=list)
    init_error: str | None = None

    @classmethod
    def with_gpus(cls, count: int, **kwargs: Any) -> FakeNvml:
        return cls([FakeGpu(uuid=f"GPU-fake-{i:04d}", **kwargs) for i in range(count)])

    def nvmlInit(self) -> None:
        if self.init_error:
            raise FakeNvmlError(self.init_error)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "fake"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return gpu.name

    nvmlMemory_v2 = 0x02000028  # the real constant's value; the fake reports the same either way

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu, version: int | None = None) -> SimpleNamespace:
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=gpu.util, memory=0)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, _sensor: int) -> int:
        return gpu.temperature

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        raise FakeNvmlError("Not Supported")
