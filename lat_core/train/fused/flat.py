"""A fused group's stacked LoRA weights, and their gradients, as views of two [jobs, P] buffers:
member j's every A and B (padding included) is row j, P the elements of one member's stacks.

Why one buffer: an optimizer step for all members (group_adamw.GroupAdamW) is then a dozen
elementwise kernels over one tensor, each member's hyperparameters a column broadcast along its
row, where each member's own AdamW ran some fifteen foreach ops over its hundreds of slices (8
members of GLA-1.3B: 17.8 ms of a 59 ms graphed step, bench/RESULTS.md of 2026-11-26).  The
stacks' layout for the adapters' matmuls is unchanged: each [jobs, R, features] view is dense
within a member and strides P from one member to the next, which a batched matmul takes as it is.
"""
from __future__ import annotations

import torch


class FlatStacks:
    """The weights and gradients buffers; ``views(buffer)`` cuts either (or any buffer laid out as
    them, such as an optimizer's moments) into the stacks' [jobs, R, features] tensors."""

    def __init__(self, shapes: list[tuple[int, int]], n_jobs: int, dtype: torch.dtype, device):
        self.shapes = list(shapes)   # (R, features) of each stack, in order
        size = sum(r * n for r, n in self.shapes)
        self.weights = torch.zeros(n_jobs, size, dtype=dtype, device=device)
        self.grads = torch.zeros_like(self.weights)

    def views(self, buffer: torch.Tensor) -> list[torch.Tensor]:
        out, start = [], 0
        for r, n in self.shapes:
            out.append(buffer[:, start:start + r * n].view(buffer.shape[0], r, n))
            start += r * n
        return out


def twin(buffer: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    """The elements of ``buffer`` that ``view`` (a view of the weights) covers in the weights, with
    its shape and strides: a member's gradient or optimizer state for one of its parameters."""
    return buffer.as_strided(view.shape, view.stride(), view.storage_offset())
