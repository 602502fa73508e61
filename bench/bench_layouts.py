"""One micro-batch's loss and LoRA gradients in the three training layouts (padded, static, packed:
tests/gpu/test_layouts_gpu.py) with every layout's numbers, not only the first to fail, against a
rounding floor: how far the padded layout's own gradient moves under a rounding of that size.

    python bench/bench_layouts.py [--device cuda|cpu] [--size gla-1.3b|tiny|HIDDENxLAYERS] DTYPE...

Why: the test's fixed bounds (5e-3 fp32, 5e-2 bf16, per parameter) hold for the tiny model and not
for GLA-1.3B's 24 random layers, which amplify rounding into the LoRA gradients; a layout whose
difference stays far under the floor computes the same step, one at or over it does not.

The floor is the test's `rounding_floor` (bf16: in float32; float32: with TF32 for torch's matmuls
on a GPU, in float64 on the CPU). Per layout it prints the loss and its relative difference, the
worst and median relative L2 difference over the LoRA parameters and the four worst parameters.
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.gpu.test_layouts_gpu import (GLA_1B3, TINY, _loss_and_grads, _model_and_batches, _rel,  # noqa: E402
                                        rounding_floor, whole_difference)


LAYOUTS = ("padded", "static", "packed")


def sizes_of(size: str) -> dict:
    if size in ("gla-1.3b", "tiny"):
        return GLA_1B3 if size == "gla-1.3b" else TINY
    hidden, layers = (int(x) for x in size.split("x"))
    return {"hidden_size": hidden, "num_hidden_layers": layers, "num_heads": 4, "vocab_size": 32000}


def report(name: str, loss: float, grads: dict, ref_loss: float, ref: dict) -> None:
    rels = sorted(((_rel(grads[n], g), n) for n, g in ref.items() if g.norm() > 0), reverse=True)
    top = [(f"{r:.1e}", n.split("base_model.model.")[-1]) for r, n in rels[:4]]
    print(f"{name}: loss {loss:.6f} vs padded {ref_loss:.6f} (rel {abs(loss - ref_loss) / abs(ref_loss):.2e}); "
          f"gradient rel L2 worst {rels[0][0]:.2e} median {statistics.median(r for r, _ in rels):.2e} "
          f"all as one {whole_difference(grads, ref):.2e}; top {top}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--size", default="gla-1.3b")
    ap.add_argument("dtypes", nargs="+", choices=["float32", "bfloat16"])
    args = ap.parse_args()
    if args.device == "cpu":
        from lat_core.train import gla_cpu
        gla_cpu.enable_cpu_gla()
    for dtype in args.dtypes:
        with tempfile.TemporaryDirectory() as tmp:
            model, batches, label_ids = _model_and_batches(pathlib.Path(tmp), sizes_of(args.size), dtype, 8,
                                                           args.device)
            got = {layout: _loss_and_grads(model, layout, batches[layout], label_ids) for layout in LAYOUTS}
            ref_loss, ref = got["padded"]
            print(f"== {args.size} {dtype} on {args.device}, padded loss {ref_loss:.6f}", flush=True)
            for layout in LAYOUTS[1:]:
                report(layout, *got[layout], ref_loss, ref)
            name, floor_loss, floor = rounding_floor(model, batches, label_ids, dtype)
            report(f"{name} (floor)", floor_loss, floor, ref_loss, ref)
            # the floor computed in a finer precision is the nearer truth: each layout's own error
            # against it, the padded layout's included, tells a layout's fault from rounding
            print(f"-- against {name}", flush=True)
            for layout in LAYOUTS:
                report(f"{layout} vs {name}", *got[layout], floor_loss, floor)
            del model
            if args.device == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
