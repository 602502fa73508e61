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
    mask, as a graphed step; left-padded rows for an eager shape), then the evaluation forwards (no
    gradients, so fla's recurrent kernel for short rows; unmasked, and left-padded with a mask, which
    fla unpads to variable lengths)."""
    import torch

    from .fla_gla import train_short_rows_in_chunks
    from .models import DTYPES
    from .tuned_kernels import seed_tuned_configs

    model = _one_layer_model(shape).to(device="cuda", dtype=DTYPES[shape.dtype])
    train_short_rows_in_chunks()
    seed_tuned_configs()  # fla's kernel modules are imported now
    ids = torch.randint(0, WARMUP_VOCAB, (shape.rows, width), device="cuda")
    mask = torch.ones_like(ids)
    mask[: shape.rows // 2, : width // 2] = 0  # half the rows left-padded
    odd = _odd_total(mask)
    if shape.eager:   # an eager step's rows, unpadded by fla: the varlen kernels' own autotune keys
        for step_mask in (mask, odd):
            model(input_ids=ids, attention_mask=step_mask).logits.float().mean().backward()
    else:             # a graphed step's static rows, unmasked
        model(input_ids=ids).logits.float().mean().backward()
    with torch.no_grad():
        model(input_ids=ids)
        model(input_ids=ids, attention_mask=mask)
        model(input_ids=ids, attention_mask=odd)
    torch.cuda.synchronize()


def _odd_total(mask):
    """``mask`` with one more token padded, so the unpadded total is not a multiple of 16. Triton
    compiles a kernel once per divisibility of its integer arguments (by 16 or not): an eager job's
    real rows have any total, and on an H100 (2026-11-27) a job after the warm-up still compiled
    fla's ``layer_norm_bwd_kernel_row`` variants for its own totals."""
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
