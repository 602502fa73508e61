"""Compile and autotune fla's GLA kernels once, for the shapes a run's jobs will use.

    python -m lat_core.train.kernel_warmup --shapes SHAPES.json [--phase PHASE.json]

Why: each job compiles the Triton kernels it meets, once per process, and eight jobs doing it at
once on a fresh machine slow each other down (355 s to the SST-2 suite's first step on an H100,
bench/RESULTS.md). Run here once first, the kernels land in Triton's on-disk cache (per user:
:func:`lat_core.contract.kernel_warmup.triton_cache_dir`) and the jobs load them.

What runs: one forward and backward of a one-layer model with the job's real layer sizes (hidden
size, heads, head dims, fused SwiGLU), dtype and micro-batch rows, at each row width, without an
attention mask and with short rows routed to the chunk kernels, as a graphed training step runs
(lat_core.train.graphs, fla_gla). The embedding and head are cut to a small vocabulary: they are
cuBLAS matmuls, not Triton kernels.

Who calls it: the warm-start process (:mod:`lat_core.train.warm`, in a forked child, since that
process itself must never touch CUDA) and ``lat-tui warmup`` (this module's main). Without a GPU or
fla it does nothing and says so; a failure is reported, never raised: jobs then compile as before.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable

from lat_core.config.job import TINY, TINY_DEFAULTS
from lat_core.contract.kernel_warmup import (KernelShape, WarmupPhase, read_shapes, triton_cache_dir,
                                             widths_phrase, write_phase)

WARMUP_VOCAB = 256  # the embedding and head are not Triton kernels: keep them small
RunShape = Callable[[KernelShape, int], None]


def warm_kernels(shapes: list[KernelShape], phase_path: Path | None = None, *,
                 run_shape: RunShape | None = None, out=print) -> WarmupPhase:
    """Run every shape at every width (``run_shape``, by default on the GPU); the phase reached.
    Its phase file says ``compiling`` meanwhile, for the engine's waiting reason."""
    if run_shape is None:
        why_not = gpu_missing()
        if why_not:
            return _finish(WarmupPhase("done", cached=True, why=why_not), phase_path, out)
        run_shape = run_on_gpu
    if not shapes:
        return _finish(WarmupPhase("done", cached=True, why="no GLA job: nothing to compile"), phase_path, out)
    widths = tuple(sorted({w for s in shapes for w in s.widths}))
    if phase_path is not None:
        write_phase(phase_path, WarmupPhase("compiling", widths))
    cache = triton_cache_dir(os.environ)
    started = time.time()
    try:
        for shape in shapes:
            _run_widths(shape, run_shape, out)
    except Exception as exc:  # noqa: BLE001 - any failure leaves the jobs to compile as before
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
        return _finish(WarmupPhase("failed", widths, time.time() - started, why=why), phase_path, out)
    seconds, cached = time.time() - started, not _written_since(cache, started)
    return _finish(WarmupPhase("done", widths, seconds, cached=cached), phase_path, out)


def _run_widths(shape: KernelShape, run_shape: RunShape, out) -> None:
    for width in shape.widths:
        started = time.time()
        run_shape(shape, width)
        out(f"[warm] kernels: {shape.describe()}, {width}-token rows: {time.time() - started:.1f} s", flush=True)


def _finish(phase: WarmupPhase, phase_path: Path | None, out) -> WarmupPhase:
    if phase_path is not None:
        write_phase(phase_path, phase)
    out(f"[warm] {summary(phase)}", flush=True)
    return phase


def summary(phase: WarmupPhase) -> str:
    if phase.state == "failed":
        return f"kernel warm-up failed after {phase.seconds:.0f} s ({phase.why}); jobs compile their own"
    if phase.why:
        return f"kernel warm-up: {phase.why}"
    where = "loaded from Triton's cache" if phase.cached else "compiled"
    return f"kernels for {widths_phrase(phase.widths)} {where} in {phase.seconds:.1f} s"


def _written_since(folder: Path, started: float) -> bool:
    """Whether Triton wrote into its cache since ``started``. Not a count of files: a kernel whose
    cache entry Triton cannot load (a cache copied from another path: its group files name the old
    paths) is compiled again under the same file names."""
    for where, _, files in os.walk(folder):
        for name in files:
            try:
                if os.stat(os.path.join(where, name)).st_mtime >= started:
                    return True
            except OSError:
                continue   # gone meanwhile (a temporary file of a writer): not a kernel
    return False


def gpu_missing() -> str | None:
    """Why nothing can be compiled here, or None."""
    import torch

    if not torch.cuda.is_available():
        return "no GPU on this machine: nothing to compile"
    try:
        from .fla_gla import gla_classes
        gla_classes()
    except ImportError as exc:
        return f"fla is not importable ({exc}): nothing to compile"
    return None


def run_on_gpu(shape: KernelShape, width: int) -> None:
    """At this width, on the GPU, the shape's one-layer model: a training forward and backward (no
    mask, as a graphed step; left-padded rows for an eager shape, at every width up to this one),
    then the evaluation forwards (no gradients, so fla's recurrent kernel for short rows; unmasked,
    and left-padded with a mask, which fla unpads to variable lengths)."""
    import torch

    from .fla_gla import train_short_rows_in_chunks
    from .models import DTYPES
    from .tuned_kernels import seed_tuned_configs

    model = _one_layer_model(shape).to(device="cuda", dtype=DTYPES[shape.dtype])
    train_short_rows_in_chunks()
    seed_tuned_configs()  # fla's kernel modules are imported now
    if shape.eager:
        train_eager_widths(model, shape.rows, eager_widths(shape.widths, width), "cuda")
    else:             # a graphed step's static rows, unmasked
        ids = _ids(shape.rows, width, "cuda")
        model(input_ids=ids).logits.float().mean().backward()
    ids = _ids(shape.rows, width, "cuda")
    mask = _left_padded(ids)
    with torch.no_grad():
        model(input_ids=ids)
        model(input_ids=ids, attention_mask=mask)
        model(input_ids=ids, attention_mask=_odd_total(mask))
    torch.cuda.synchronize()


def eager_widths(bucket_widths: tuple[int, ...], width: int) -> range:
    """The row widths an eager job's micro-batches take up to ``width`` and above the bucket below it.
    An eager batch is padded to its longest row, so it has any width; fla's norm kernels take
    constants computed from the row count (``layer_norm_bwd``'s ``BS``, ``GS``), so each count
    compiles a kernel of its own (on an H200, 2026-11-27, a job after a warm-up of the bucket widths
    alone still compiled ``layer_norm_bwd_kernel_row`` variants)."""
    below = max((w for w in bucket_widths if w < width), default=0)
    return range(below + 1, width + 1)


def train_eager_widths(model, rows: int, widths: range, device: str) -> None:
    """A training forward and backward at each width, on left-padded rows as an eager step has them
    (fla unpads them: the varlen kernels autotune under keys of their own); at the widest also on an
    unpadded total of the other divisibility by 16 (:func:`_odd_total`)."""
    for width in widths:
        ids = _ids(rows, width, device)
        mask = _left_padded(ids)
        masks = (mask, _odd_total(mask)) if width == widths[-1] else (mask,)
        for step_mask in masks:
            model(input_ids=ids, attention_mask=step_mask).logits.float().mean().backward()


def _ids(rows: int, width: int, device: str):
    import torch
    return torch.randint(0, WARMUP_VOCAB, (rows, width), device=device)


def _left_padded(ids):
    """A mask with half the rows left-padded over half their width."""
    import torch
    mask = torch.ones_like(ids)
    mask[: ids.shape[0] // 2, : ids.shape[1] // 2] = 0
    return mask


def _odd_total(mask):
    """``mask`` with one more token padded, so the unpadded total is not a multiple of 16. Triton
    compiles a kernel once per divisibility of its integer arguments (by 16 or not), and an eager
    job's real rows have any total."""
    odd = mask.clone()
    odd[-1, 0] = 0
    return odd


def _one_layer_model(shape: KernelShape):
    from .fla_gla import gla_classes

    config_cls, model_cls = gla_classes()
    own = {"fuse_cross_entropy": False, "fuse_swiglu": shape.fused_swiglu, "tie_word_embeddings": False,
           "num_hidden_layers": 1, "vocab_size": WARMUP_VOCAB}
    if shape.name_or_path == TINY:
        config = config_cls(**{**TINY_DEFAULTS["gla"], **dict(shape.tiny), **own})
    else:
        config = config_cls.from_pretrained(shape.name_or_path, **own)
    import torch
    with torch.device("cuda"):
        return model_cls(config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lat_core.train.kernel_warmup")
    parser.add_argument("--shapes", required=True, type=Path, help="JSON list of kernel shapes")
    parser.add_argument("--phase", type=Path, help="where to report the phase (for the engine)")
    parser.add_argument("--save-tunings", action="store_true",
                        help="add the configs fla's autotuning chose to this GPU model's table in "
                             "lat_core/train/kernel_tunings (run alone on an idle GPU; every kernel is autotuned)")
    args = parser.parse_args(argv)
    try:
        shapes, env = read_shapes(args.shapes)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    os.environ.update(env)  # the jobs' cache and tuning variables, read when kernels compile
    if args.save_tunings:   # autotune every kernel: a seeded config (a sibling GPU's) would be saved as this GPU's
        from .tuned_kernels import SWITCH
        os.environ[SWITCH] = "off"
    print(f"[warm] Triton cache: {triton_cache_dir(os.environ)}", flush=True)
    phase = warm_kernels(shapes, args.phase)
    if phase.state == "failed":
        return 1
    if args.save_tunings and not phase.why:
        from .tuned_kernels import save_tunings
        save_tunings()
    return 0


if __name__ == "__main__":
    sys.exit(main())
