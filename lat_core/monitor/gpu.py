"""NVML behind one small adapter.

Initialises lazily, degrades to "no GPU: <reason>" instead of raising, and returns immutable
snapshots. ``nvml`` is the ``pynvml`` module (from nvidia-ml-py) or, in tests, a fake with the same
calls (:mod:`lat_core.monitor.fake_nvml`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
H = TypeVar("H")  # a device handle: whatever the NVML library hands out, passed back to it


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_used: int
    memory_total: int
    utilization: int | None = None
    temperature: int | None = None
    power_watts: float | None = None
    processes: tuple[tuple[int, int], ...] = ()  # (pid, used GPU memory in bytes)


@dataclass(frozen=True)
class GpuSnapshot:
    gpus: tuple[GpuInfo, ...]
    reason: str = ""  # why there is no GPU, when ``gpus`` is empty

    @property
    def available(self) -> bool:
        return bool(self.gpus)

    def by_index(self, index: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)


class MemoryInfo(Protocol):
    @property
    def used(self) -> int: ...
    @property
    def total(self) -> int: ...


class Utilization(Protocol):
    @property
    def gpu(self) -> int: ...


class ProcessInfo(Protocol):
    @property
    def pid(self) -> int: ...
    @property
    def usedGpuMemory(self) -> int | None: ...


class Nvml(Protocol[H]):
    """The pynvml calls GpuProbe makes (pynvml ships no types; FakeNvml implements the same calls,
    its FakeGpu as the handle). An old driver may lack nvmlSystemGetDriverVersion: the probe says so."""

    def nvmlInit(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> H: ...
    def nvmlDeviceGetUUID(self, handle: H) -> str | bytes: ...
    def nvmlDeviceGetName(self, handle: H) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: H, version: int | None = None) -> MemoryInfo: ...
    def nvmlDeviceGetUtilizationRates(self, handle: H) -> Utilization: ...
    def nvmlDeviceGetTemperature(self, handle: H, sensor: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: H) -> int: ...  # milliwatts
    def nvmlDeviceGetComputeRunningProcesses(self, handle: H) -> Iterable[ProcessInfo]: ...


class GpuProbe:
    """Reads GPUs through NVML; all NVML errors become a reason, never an exception."""

    def __init__(self, nvml: Nvml[Any] | None = None):
        self._nvml = nvml
        self._ready = False
        self._reason = ""

    def _init(self) -> Nvml[Any] | None:
        """NVML, initialised once; None (and ``_reason`` says why) where it cannot be."""
        if self._ready or self._reason:
            return self._nvml if self._ready else None
        try:
            nvml = self._nvml if self._nvml is not None else _pynvml()
            self._nvml = nvml
            nvml.nvmlInit()
            self._ready = True
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError, ...
            self._reason = _describe(exc)
            return None
        return nvml

    def driver_version(self) -> str | None:
        """The NVIDIA driver's version, or None where NVML cannot say (no driver, no pynvml)."""
        nvml = self._init()
        if nvml is None:
            return None
        try:
            return _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:  # an old driver without the call: the record just lacks it
            return None

    def snapshot(self) -> GpuSnapshot:
        nvml = self._init()
        if nvml is None:
            return GpuSnapshot((), self._reason)
        try:
            count = nvml.nvmlDeviceGetCount()
            return GpuSnapshot(tuple(_read(nvml, i) for i in range(count)),
                               "" if count else "no GPU: NVML sees 0 devices")
        except Exception as exc:  # a device falling off the bus must not crash a monitor
            return GpuSnapshot((), _describe(exc))


def _read(nv: Nvml[H], index: int) -> GpuInfo:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    memory = _memory_info(nv, handle)
    return GpuInfo(
        index=index,
        uuid=_text(nv.nvmlDeviceGetUUID(handle)),
        name=_text(nv.nvmlDeviceGetName(handle)),
        memory_used=int(memory.used),
        memory_total=int(memory.total),
        utilization=_optional(lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu),
        temperature=_optional(lambda: nv.nvmlDeviceGetTemperature(handle, 0)),
        power_watts=_optional(lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0),
        processes=_optional(lambda: _processes(nv, handle)) or (),
    )


def _pynvml() -> Nvml[Any]:
    # from nvidia-ml-py: light, no CUDA runtime needed; it ships no stubs and no py.typed marker
    import pynvml  # type: ignore[import-untyped]

    nvml: Nvml[Any] = pynvml
    return nvml


def _memory_info(nv: Nvml[H], handle: H) -> MemoryInfo:
    """v2 memory info where the driver has it: its ``used`` leaves out the driver's reserved memory,
    so it matches nvidia-smi (v1 counts ~600 MiB reserved on an idle H200 as used)."""
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return nv.nvmlDeviceGetMemoryInfo(handle, version=version)
        except Exception:  # NVMLError_FunctionNotFound on old drivers, TypeError on old bindings
            pass
    return nv.nvmlDeviceGetMemoryInfo(handle)


def _processes(nv: Nvml[H], handle: H) -> tuple[tuple[int, int], ...]:
    procs = list(nv.nvmlDeviceGetComputeRunningProcesses(handle))
    # usedGpuMemory is None where the driver hides it (e.g. inside some containers)
    return tuple((int(p.pid), int(p.usedGpuMemory or 0)) for p in procs)


def _optional(read: Callable[[], T]) -> T | None:
    """Values some GPUs do not report (NOT_SUPPORTED) become None."""
    try:
        return read()
    except Exception:  # NVMLError_NotSupported and friends: the field is simply absent
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ImportError):
        return "no GPU: nvidia-ml-py is not installed"
    return f"no GPU: {exc or type(exc).__name__}"
