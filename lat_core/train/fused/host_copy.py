"""A step's loss read on the host without waiting for the passes queued after it.

Why: a fused group reads a step's losses one pass late, so the host builds the next pass while the
GPU runs the last one. But ``float(tensor)`` copies on the current stream, behind everything queued
there, the next pass too: the read waited for that pass, and the host then built the following one
while the GPU stood idle (every pass, where a step is one pass: the SST-2 sample's folded steps). Here
the copy is queued into pinned memory at the step's end, with an event behind it, and the read waits
for that event alone.
"""
from __future__ import annotations

import torch


class HostCopy:
    """A device value copied to the host behind the work queued so far; ``value()`` waits for that copy
    only. On the CPU it is the value itself."""

    def __init__(self, value: torch.Tensor):
        self._ready: torch.cuda.Event | None = None
        if value.device.type != "cuda":
            self._host = value.detach()   # as the GPU copy: a value, never part of a graph
            return
        self._host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
        self._host.copy_(value.detach(), non_blocking=True)
        self._ready = torch.cuda.Event()
        self._ready.record()

    def value(self) -> float:
        if self._ready is not None:
            self._ready.synchronize()
        return float(self._host)
