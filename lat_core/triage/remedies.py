"""Remedies per failure class, ranked cheapest first, offered only where they change something.

A remedy that is already in force (gradient checkpointing on, no dataloader workers, batch size 1,
the allocator setting present) is not offered: a retry with it would fail the same way.
"""

from __future__ import annotations

from lat_core.triage.model import Remedy
from lat_core.triage.sources import config_value

EXPANDABLE = "expandable_segments:True"


def cuda_oom_remedies(config: dict, env: dict, kind: str, numbers: dict) -> list[Remedy]:
    candidates = [
        expandable_segments(env) if kind in ("fragmentation", "contention", "unknown") else None,
        gradient_checkpointing(config),
        smaller_micro_batch(config),
        fewer_slots() if _others_present(kind, numbers) else None,
    ]
    return [r for r in candidates if r is not None]


def host_oom_remedies(config: dict) -> list[Remedy]:
    return [r for r in (fewer_workers(config), fewer_slots()) if r is not None]


def _others_present(kind: str, numbers: dict) -> bool:
    return kind in ("contention", "unknown") or numbers.get("other_processes_bytes", 0) > 0


def expandable_segments(env: dict) -> Remedy | None:
    current = str(env.get("PYTORCH_CUDA_ALLOC_CONF", "")).strip()
    if "expandable_segments:true" in current.replace(" ", "").lower():
        return None
    value = f"{current},{EXPANDABLE}" if current else EXPANDABLE
    return Remedy("expandable_segments", "let PyTorch's allocator grow segments instead of "
                  "caching fixed blocks, so freed memory can be reused for larger requests",
                  "free: no change to speed or results", {"PYTORCH_CUDA_ALLOC_CONF": value})


def fewer_workers(config: dict) -> Remedy | None:
    workers = int(config_value(config, "train.num_workers", 0) or 0)
    if workers <= 0:
        return None
    fewer = workers // 2
    return Remedy("fewer_workers", f"dataloader workers {workers} -> {fewer} (each is a process "
                  "with its own copy of the dataset in host RAM)",
                  "about free: data loading may become the bottleneck", {"train.num_workers": fewer})


def gradient_checkpointing(config: dict) -> Remedy | None:
    if config_value(config, "train.gradient_checkpointing", False) is True:
        return None
    return Remedy("gradient_checkpointing", "recompute activations in the backward pass instead "
                  "of keeping them", "~30% slower steps, same results",
                  {"train.gradient_checkpointing": True})


def smaller_micro_batch(config: dict) -> Remedy | None:
    batch = int(config_value(config, "train.batch_size", 8) or 1)
    accum = int(config_value(config, "train.grad_accum", 1) or 1)
    micro = _largest_proper_divisor(batch)
    if micro is None:
        return None
    factor = batch // micro
    return Remedy("smaller_micro_batch", f"micro-batch {batch} -> {micro} with gradient accumulation "
                  f"{accum} -> {accum * factor} (the effective batch stays {batch * accum})",
                  "same results; lower GPU utilisation per step",
                  {"train.batch_size": micro, "train.grad_accum": accum * factor})


def _largest_proper_divisor(n: int) -> int | None:
    """The biggest micro-batch below ``n`` that keeps the effective batch exact (8 -> 4, 6 -> 3)."""
    for candidate in range(n // 2, 0, -1):
        if n % candidate == 0:
            return candidate
    return None


def fewer_slots() -> Remedy:
    return Remedy("fewer_slots", "run one job fewer at a time on this GPU (and host)",
                  "lower throughput: fewer jobs in parallel", {"plan.slots_delta": -1})


def libuv_remedies() -> list[Remedy]:
    return [Remedy("disable_libuv", "use the classic TCPStore backend instead of libuv",
                   "free: only the rendezvous store changes", {"USE_LIBUV": "0"})]


def nccl_remedies(kind: str) -> list[Remedy]:
    debug = Remedy("nccl_debug", "log NCCL's own view of the failure on the retry",
                   "free: more log output", {"NCCL_DEBUG": "INFO", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"})
    if kind == "watchdog_timeout":
        return [debug]
    return [debug, Remedy("nccl_p2p_off", "route GPU-to-GPU traffic through host memory "
                          "(works around broken peer-to-peer / IOMMU setups)",
                          "slower collectives", {"NCCL_P2P_DISABLE": "1"})]


def rendezvous_remedies(kind: str) -> list[Remedy]:
    what = ("retry on a free port (another job held this one)" if kind == "port_in_use"
            else "retry once every rank can start (a peer was late or never came up)")
    return [Remedy("retry", what, "free", {})]


def device_fault_remedies(kind: str) -> list[Remedy]:
    if kind in ("ecc", "xid"):
        return [Remedy("avoid_device", "retry on another GPU and have this one checked "
                       "(nvidia-smi -q -d ECC, dmesg for Xid)", "one GPU fewer until it is checked",
                       {"plan.exclude_failed_device": True})]
    return [Remedy("launch_blocking", "run kernels synchronously so the error names the kernel "
                   "that faulted", "much slower: for locating the bug, not for training",
                   {"CUDA_LAUNCH_BLOCKING": "1"})]


def resume_remedy(events) -> list[Remedy]:
    steps = [e.get("step") for e in events if e.get("event") == "checkpoint"]
    if not steps:
        return []
    return [Remedy("resume", f"resume from the last checkpoint (step {steps[-1]}) with a longer "
                   "time limit", "free: finished steps are kept", {"plan.resume": True})]
