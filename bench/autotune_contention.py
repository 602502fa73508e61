"""What Triton's autotuning picks for fla's kernels when eight processes tune at once, against one
process tuning alone, and what the difference costs a training step (issue 26: "measure what
autotuning under contention picks against autotuning alone").

    python bench/autotune_contention.py --out DIR [--processes 8] [--width 16] [--rows 8] [--repeats 50]

Why it matters: before the warm-up and the shipped tables (lat_core/train/tuned_kernels.py), eight jobs
started on a fresh machine each autotuned fla's kernels at once, timing every candidate config on a
GPU the seven others were loading. A config that won under that noise may be slower on an idle GPU,
and Triton's cache kept it for every later job on the machine.

What it does, on one GPU, with the suite's GLA-1.3B layer (bench_suite_throughput.MODEL_1B3, bf16) at one
row width, graphed (unmasked) rows:
1. ``--processes`` kernel warm-ups at once, each autotuning every kernel (``--save-tunings``: tables
   off) into a Triton cache and a tunings folder of its own;
2. then one alone, the same way;
3. per kernel and autotune key, which contended picks differ from the lone one;
4. one forward and backward of the layer timed (CUDA events, median of ``--repeats``) on an idle GPU
   for each distinct set of picks, seeded from its table, each in a fresh process and cache.
Writes DIR/contention.json and prints it. Needs a GPU and fla; elsewhere it says so and exits 2.
Expected cost: the lone tuning of the 16-token shape took 256 s on an H200 (bench/RESULTS.md,
2026-11-26), so about 15 minutes of GPU time in all; run it detached (bench/gpu_check.sh's pattern).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_suite_throughput import MODEL_1B3  # noqa: E402
from lat_core.config.job import GlaSection  # noqa: E402
from lat_core.contract.kernel_warmup import KernelShape, read_shapes, write_shapes  # noqa: E402


def suite_shape(width: int, rows: int) -> KernelShape:
    """The suite's layer: GLA-1.3B sizes in bf16 (SwiGLU fused or not as the GLA default says),
    ``rows`` rows of ``width`` tokens, graphed."""
    return KernelShape("gla", MODEL_1B3["name_or_path"], tuple(sorted(MODEL_1B3["tiny"].items())),
                       MODEL_1B3["dtype"], fused_swiglu=GlaSection().use_fused_swiglu, rows=rows, widths=(width,))


def tune(shapes: Path, name: str, out: Path) -> subprocess.Popen:
    """A warm-up that autotunes every kernel and saves its picks as a table in out/tables/name."""
    (out / "tables" / name).mkdir(parents=True, exist_ok=True)
    with open(out / f"tune-{name}.log", "w") as log:   # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "lat_core.train.kernel_warmup", "--shapes", str(shapes),
                                 "--save-tunings"], env=child_env(out, name, name), stdout=log,
                                stderr=subprocess.STDOUT)


def child_env(out: Path, cache: str, table: str) -> dict[str, str]:
    """A child's environment: this tree importable, Triton's cache out/caches/cache, tunings out/tables/table."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "TRITON_CACHE_DIR": str(out / "caches" / cache), "LAT_KERNEL_TUNINGS_DIR": str(out / "tables" / table)}


def finish(procs: dict[str, subprocess.Popen], started: float) -> dict[str, float]:
    """Each tuning's wall seconds, when it ended; SystemExit naming a tuning that failed (its log says why)."""
    walls: dict[str, float] = {}
    while len(walls) < len(procs):
        for name, proc in procs.items():
            if name in walls or proc.poll() is None:
                continue
            if proc.returncode != 0:
                raise SystemExit(f"autotune_contention: the tuning {name} failed (exit {proc.returncode}); "
                                 f"see tune-{name}.log")
            walls[name] = round(time.time() - started, 1)
        time.sleep(0.5)
    return walls


def picks(table_dir: Path) -> dict[str, str]:
    """``kernel|key`` -> the config chosen, as text, from the one table a tuning saved there."""
    tables = list(table_dir.glob("*.json"))
    if len(tables) != 1:
        raise SystemExit(f"autotune_contention: expected one table in {table_dir}, found {len(tables)}")
    kernels = json.loads(tables[0].read_text())["kernels"]
    return {f"{kernel}|{json.dumps(e['key'])}": json.dumps(e["config"], sort_keys=True)
            for kernel, entries in kernels.items() for e in entries}


def compare_picks(alone: dict[str, str], contended: dict[str, dict[str, str]]) -> dict:
    """Per contended tuning, the kernel keys whose pick differs from the lone tuning's (a key one of
    them never tuned counts as differing); and how many keys differ in any of them."""
    differing = {name: sorted(k for k in alone.keys() | got.keys() if alone.get(k) != got.get(k))
                 for name, got in contended.items()}
    any_differ = sorted(set().union(*differing.values())) if differing else []
    return {"keys": len(alone), "differ_per_process": {n: len(d) for n, d in differing.items()},
            "differ_in_any": len(any_differ), "differing_keys": any_differ}


def distinct_tables(alone: dict[str, str], contended: dict[str, dict[str, str]]) -> dict[str, str]:
    """One tuning per distinct set of picks (the lone one first): name -> the names sharing its picks."""
    seen: dict[str, list[str]] = {}
    for name, got in {"alone": alone, **contended}.items():
        key = json.dumps(got, sort_keys=True)
        seen.setdefault(key, []).append(name)
    return {names[0]: ",".join(names) for names in seen.values()}


def time_step(shapes: Path, table: str, out: Path, repeats: int) -> float:
    """Median milliseconds of the layer's forward and backward, seeded from out/tables/table, in a
    fresh process and Triton cache (so it compiles exactly those picks)."""
    done = subprocess.run([sys.executable, __file__, "--time-one", str(shapes), "--repeats", str(repeats)],
                          env=child_env(out, f"time-{table}", table), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"autotune_contention: timing {table} failed: {done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def time_one(shapes_path: Path, repeats: int) -> float:
    """In this process: the shape's layer, seeded, a few passes to compile, then ``repeats`` timed."""
    import torch

    from lat_core.train.fla_gla import train_short_rows_in_chunks
    from lat_core.train.kernel_warmup import WARMUP_VOCAB, _one_layer_model
    from lat_core.train.models import DTYPES
    from lat_core.train.tuned_kernels import seed_tuned_configs

    shape = read_shapes(shapes_path)[0][0]
    model = _one_layer_model(shape).to(device="cuda", dtype=DTYPES[shape.dtype])
    train_short_rows_in_chunks()
    seed_tuned_configs(out=lambda *a, **k: print(*a, file=sys.stderr))
    ids = torch.randint(0, WARMUP_VOCAB, (shape.rows, shape.widths[0]), device="cuda")
    times = []
    for i in range(repeats + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(input_ids=ids).logits.float().mean().backward()
        end.record()
        torch.cuda.synchronize()
        if i >= 3:   # the first passes compile
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def run(args) -> dict:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    shapes = out / "shapes.json"
    write_shapes(shapes, [suite_shape(args.width, args.rows)])
    started = time.time()
    names = [f"contended-{i}" for i in range(args.processes)]
    contended_walls = finish({n: tune(shapes, n, out) for n in names}, started)
    started = time.time()
    alone_wall = finish({"alone": tune(shapes, "alone", out)}, started)["alone"]
    alone = picks(out / "tables" / "alone")
    contended = {n: picks(out / "tables" / n) for n in names}
    timed = {name: {"shared_by": shared, "step_ms": round(time_step(shapes, name, out, args.repeats), 3)}
             for name, shared in distinct_tables(alone, contended).items()}
    lone_ms = timed["alone"]["step_ms"]
    for entry in timed.values():
        entry["vs_alone"] = round(entry["step_ms"] / lone_ms, 3)
    return {"shape": suite_shape(args.width, args.rows).describe(), "processes": args.processes,
            "tune_wall_s": {"contended": contended_walls, "alone": alone_wall},
            "picks": compare_picks(alone, contended), "step_ms": timed}


def gpu_missing() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no GPU on this machine"
    try:
        import fla  # noqa: F401
    except ImportError:
        return "fla is not installed"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/autotune_contention.py")
    parser.add_argument("--out", default="/tmp/lat-autotune-contention")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--time-one", type=Path, help=argparse.SUPPRESS)   # the timing child
    args = parser.parse_args(argv)
    why = gpu_missing()
    if why:
        print(f"autotune_contention: {why}: nothing to measure", file=sys.stderr)
        return 2
    if args.time_one:
        print(time_one(args.time_one, args.repeats))
        return 0
    result = run(args)
    (Path(args.out) / "contention.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
