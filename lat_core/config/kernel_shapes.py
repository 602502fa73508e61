"""The GPU kernel shapes a set of jobs will train with, from their typed configs alone (torch-free:
the engine and ``lat-tui warmup`` compute them; :mod:`lat_core.train.kernel_warmup` compiles them).

Why these fields: fla's Triton kernels are specialised and autotuned per layer size (hidden size,
heads, head dims: the model), dtype and row width; a job pads each micro-batch of ``batch_size`` rows
to one of :func:`bucket_widths` (graphed steps always, and the eager path meets the same widths).
Only GLA is warmed: Mamba's fast path (mamba_ssm, causal_conv1d) ships compiled CUDA kernels.
"""
from __future__ import annotations

from typing import Iterable

from lat_core.config.graph_capture import trains_eagerly_on_a_gpu
from lat_core.config.job import TINY, JobConfig
from lat_core.contract.kernel_warmup import KernelShape

WARMED_FAMILIES = ("gla",)


def bucket_widths(max_seq_len: int, smallest: int = 16) -> list[int]:
    """Row widths of a graphed job: 16, 32, 64, ... below max_seq_len, then max_seq_len itself.
    Every micro-batch is padded to the smallest that holds its longest example, so a job needs one
    captured graph per width it meets (a handful), not one per length."""
    out, width = [], smallest
    while width < max_seq_len:
        out.append(width)
        width *= 2
    return out + [max_seq_len]


ShapeKey = tuple[str, str, tuple[tuple[str, int | str | float | bool], ...], str, bool, int, bool]


def shapes_for(cfgs: Iterable[JobConfig]) -> list[KernelShape]:
    """One shape per distinct (model, dtype, rows, eager or graphed steps) among the jobs, with every
    width any of them uses."""
    widths: dict[ShapeKey, set[int]] = {}
    for cfg in cfgs:
        if cfg.model.family not in WARMED_FAMILIES:
            continue
        m = cfg.model
        tiny = tuple(sorted(m.tiny.items())) if m.name_or_path == TINY else ()
        key: ShapeKey = (m.family, m.name_or_path, tiny, m.dtype, cfg.gla.use_fused_swiglu, cfg.train.batch_size,
                         trains_eagerly_on_a_gpu(cfg))
        widths.setdefault(key, set()).update(bucket_widths(cfg.train.max_seq_len))
    return [KernelShape(family, name, tiny, dtype, swiglu, rows, widths=tuple(sorted(w)), eager=eager)
            for (family, name, tiny, dtype, swiglu, rows, eager), w in widths.items()]
