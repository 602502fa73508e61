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
1. one kernel warm-up alone, autotuning every kernel (``--save-tunings``: tables off) into a Triton
   cache and a tunings folder of its own;
2. then ``--processes`` such warm-ups at once, each into its own cache and folder;
3. per kernel and autotune key, which contended picks differ from the lone one; and, as a yardstick
   of how much two lone tunings differ, the shipped table (tuned alone on an idle GPU of this model,
   or of a sibling: tuned_kernels.choose_table) on the same keys;
4. the layer's training forward and backward timed on the idle GPU for each distinct set of picks,
   seeded from its table, each in a fresh process: as a replayed CUDA graph (the defaults' step:
   the kernels' own time) and eagerly (launch-bound at 16 tokens), medians of ``--repeats``; the
   lone picks are timed first and again last, so the JSON shows the timing's own noise.
The timing processes share the lone tuning's Triton cache, which holds every candidate compiled.
Writes DIR/contention.json after each stage (picks first, then timings) and prints it at the end.
Needs a GPU and fla; elsewhere it says so and exits 2. Cost at 16 tokens on an H100 (bench/RESULTS.md,
2026-11-27): the lone tuning 341 s, eight at once 496 s, eleven timings about 3 minutes: 17 minutes of
GPU time; at 256 tokens the lone tuning alone passed 520 s. Run it detached
(``bash bench/gpu_check.sh start --contention-only``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_suite_throughput import MODEL_1B3  # noqa: E402
from lat_core.config.job import GlaSection  # noqa: E402
from lat_core.contract.kernel_tunings import DIR_VARIABLE, VARIABLES, read_table  # noqa: E402
from lat_core.contract.kernel_warmup import KernelShape, read_shapes, write_shapes  # noqa: E402


def suite_shape(width: int, rows: int) -> KernelShape:
    """The suite's layer: GLA-1.3B sizes in bf16 (SwiGLU fused or not as the GLA default says),
    ``rows`` rows of ``width`` tokens, graphed."""
    return KernelShape("gla", MODEL_1B3["name_or_path"], tuple(sorted(MODEL_1B3["tiny"].items())),
                       MODEL_1B3["dtype"], fused_swiglu=GlaSection().use_fused_swiglu, rows=rows, widths=(width,))


TUNE_TIMEOUT_S = 3600   # eight tunings at once: a hang is reported, not waited on for the whole lease
SHIPPED = "shipped"       # the shipped table's name among the tunings


def tune(shapes: Path, name: str, out: Path) -> subprocess.Popen:
    """A warm-up that autotunes every kernel and saves its picks as a table in out/tables/name."""
    (out / "tables" / name).mkdir(parents=True, exist_ok=True)
    with open(out / f"tune-{name}.log", "w") as log:   # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "lat_core.train.kernel_warmup", "--shapes", str(shapes),
                                 "--save-tunings"], env=child_env(out / "caches" / name, out / "tables" / name),
                                stdout=log, stderr=subprocess.STDOUT)


def child_env(cache: Path, tables: Path | None) -> dict[str, str]:
    """A child's environment: this tree importable, Triton's cache ``cache``, the tunings in ``tables``
    (None: the shipped ones)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "TRITON_CACHE_DIR": str(cache)}
    for variable in VARIABLES:   # tunings on (a tuning child turns them off itself), from ``tables``
        env.pop(variable, None)
    return env if tables is None else {**env, DIR_VARIABLE: str(tables)}


def finish(procs: dict[str, subprocess.Popen], started: float, timeout_s: float = TUNE_TIMEOUT_S) -> dict[str, float]:
    """Each tuning's wall seconds, when it ended; SystemExit naming a tuning that failed (its log says
    why) or that ran past ``timeout_s`` (every one still running is then killed)."""
    walls: dict[str, float] = {}
    while len(walls) < len(procs):
        for name, proc in procs.items():
            if name in walls or proc.poll() is None:
                continue
            if proc.returncode != 0:
                _kill(procs)
                raise SystemExit(f"autotune_contention: the tuning {name} failed (exit {proc.returncode}); "
                                 f"see tune-{name}.log")
            walls[name] = round(time.time() - started, 1)
        if time.time() - started > timeout_s and len(walls) < len(procs):
            _kill(procs)
            raise SystemExit(f"autotune_contention: {sorted(set(procs) - set(walls))} still tuning after "
                             f"{timeout_s:.0f} s: killed")
        time.sleep(0.5)
    return walls


def _kill(procs: dict[str, subprocess.Popen]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def picks(table_dir: Path) -> dict[str, str]:
    """``kernel|key`` -> the config chosen, as text, from the one table a tuning saved there."""
    tables = list(table_dir.glob("*.json"))
    if len(tables) != 1:
        raise SystemExit(f"autotune_contention: expected one table in {table_dir}, found {len(tables)}")
    return table_picks(tables[0])


def table_picks(table: Path) -> dict[str, str]:
    """``kernel|key`` -> config text of a table as tuned_kernels writes it (read and checked by the contract)."""
    kernels = read_table(table)
    return {f"{kernel}|{json.dumps(e['key'])}": json.dumps(e["config"], sort_keys=True)
            for kernel, entries in kernels.items() for e in entries}


def compare_picks(alone: dict[str, str], others: dict[str, dict[str, str]]) -> dict:
    """Per other tuning, the kernel keys whose pick differs from the lone tuning's (a key one of
    them never tuned counts as differing); and how many keys differ in any of them."""
    differing = {name: sorted(k for k in alone.keys() | got.keys() if alone.get(k) != got.get(k))
                 for name, got in others.items()}
    any_differ = sorted(set().union(*differing.values())) if differing else []
    return {"keys": len(alone), "differ_per_process": {n: len(d) for n, d in differing.items()},
            "differ_in_any": len(any_differ), "differing_keys": any_differ}


def on_keys(table: dict[str, str], keys: set[str]) -> dict[str, str]:
    """``table``'s picks for ``keys`` only (the shipped table holds other shapes' keys too)."""
    return {k: v for k, v in table.items() if k in keys}


def distinct_tables(alone: dict[str, str], others: dict[str, dict[str, str]]) -> dict[str, str]:
    """One tuning per distinct set of picks (the lone one first): name -> the names sharing its picks."""
    seen: dict[str, list[str]] = {}
    for name, got in {"alone": alone, **others}.items():
        key = json.dumps(got, sort_keys=True)
        seen.setdefault(key, []).append(name)
    return {names[0]: ",".join(names) for names in seen.values()}


def time_step(shapes: Path, tables: Path | None, out: Path, repeats: int) -> dict[str, float | str | None]:
    """The layer's pass seeded from ``tables`` (None: the shipped ones), in a fresh process on the
    lone tuning's Triton cache (every candidate config is compiled there): time_one's medians."""
    done = subprocess.run([sys.executable, __file__, "--time-one", str(shapes), "--repeats", str(repeats)],
                          env=child_env(out / "caches" / "alone", tables), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"autotune_contention: timing {tables or SHIPPED} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_one(shapes_path: Path, repeats: int) -> dict[str, float | str | None]:
    """In this process: the shape's training forward and backward, seeded; eagerly (a few passes
    compile first), then captured as a CUDA graph and replayed, as a graphed job's step is. Median
    milliseconds of ``repeats`` of each; how many configs the table seeded (the rest were autotuned
    here); ``graph_error`` where the capture failed."""
    import torch

    from lat_core.train.fla_gla import train_short_rows_in_chunks
    from lat_core.train.graphs import capture, on_side_stream
    from lat_core.train.kernel_warmup import WARMUP_VOCAB, _one_layer_model
    from lat_core.train.models import DTYPES
    from lat_core.train.tuned_kernels import seed_tuned_configs

    shape = read_shapes(shapes_path)[0][0]
    model = _one_layer_model(shape).to(device="cuda", dtype=DTYPES[shape.dtype])
    model.get_input_embeddings().requires_grad_(False)   # as in a LoRA job; its backward is no fla kernel
    train_short_rows_in_chunks()
    seeded = seed_tuned_configs(out=lambda *a, **k: print(*a, file=sys.stderr))
    ids = torch.randint(0, WARMUP_VOCAB, (shape.rows, shape.widths[0]), device="cuda")

    def step() -> None:
        model(input_ids=ids).logits.float().mean().backward()

    stream = torch.cuda.Stream()
    for _ in range(3):   # compile, and warm up as torch.cuda.graphs asks before a capture
        on_side_stream(stream, ids.device, step)
    result: dict[str, float | str | None] = {"seeded": seeded, "eager_ms": median_ms(step, repeats), "graph_ms": None}
    try:
        graph, _ = capture(step, torch.cuda.graph_pool_handle(), stream)
    except Exception as exc:  # noqa: BLE001 - the eager timing still stands; the JSON says why
        result["graph_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return result
    result["graph_ms"] = median_ms(graph.replay, repeats)
    return result


def median_ms(fn, repeats: int) -> float:
    """Median milliseconds of ``fn`` on the GPU (CUDA events around each call)."""
    import torch

    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return round(statistics.median(times), 4)


def shipped_table() -> Path | None:
    """The shipped table this GPU seeds from (its own model's or a sibling's), or None."""
    from lat_core.train.tuned_kernels import TUNINGS_DIR, choose_table, this_gpu

    table = choose_table(this_gpu(), TUNINGS_DIR)
    return table.path if table is not None else None


def run(args, *, tune_fn=tune, time_fn=time_step, shipped: Path | None = None) -> dict:
    """The stages in order, writing contention.json after each; the result."""
    out = Path(args.out).resolve()
    fresh_start(out)
    shapes = out / "shapes.json"
    shape = suite_shape(args.width, args.rows)
    write_shapes(shapes, [shape])
    result: dict = {"shape": shape.describe(), "processes": args.processes}
    started = time.time()
    alone_wall = finish({"alone": tune_fn(shapes, "alone", out)}, started)["alone"]
    started = time.time()
    names = [f"contended-{i}" for i in range(args.processes)]
    contended_walls = finish({n: tune_fn(shapes, n, out) for n in names}, started)
    result["tune_wall_s"] = {"alone": alone_wall, "contended": contended_walls}
    alone = picks(out / "tables" / "alone")
    contended = {n: picks(out / "tables" / n) for n in names}
    result["picks"] = compare_picks(alone, contended)
    others = dict(contended)
    if shipped is not None:
        others[SHIPPED] = on_keys(table_picks(shipped), set(alone))
        result["shipped_vs_alone"] = {"table": shipped.name, **compare_picks(alone, {SHIPPED: others[SHIPPED]})}
    save(out, result)
    result["step_ms"] = time_tables(distinct_tables(alone, others), shapes, out, args.repeats, time_fn)
    save(out, result)
    return result


def fresh_start(out: Path) -> None:
    """``out`` without a former run's tables, caches and JSON: a tuning that saved nothing must not
    be read as a former one's picks, and a warm Triton cache would skip the autotuning measured."""
    for stale in ("tables", "caches"):
        shutil.rmtree(out / stale, ignore_errors=True)
    (out / "contention.json").unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


def time_tables(groups: dict[str, str], shapes: Path, out: Path, repeats: int, time_fn) -> dict[str, dict]:
    """Each distinct set of picks timed (the lone one first and again last), with its ratios to the lone one's."""
    def tables(name: str) -> Path | None:
        return None if name == SHIPPED else out / "tables" / name

    timed = {name: {"shared_by": shared, **time_fn(shapes, tables(name), out, repeats)} for name, shared in groups.items()}
    timed["alone-again"] = {"shared_by": "alone", **time_fn(shapes, tables("alone"), out, repeats)}
    lone = timed["alone"]
    for entry in timed.values():
        for measure in ("graph_ms", "eager_ms"):
            if entry.get(measure) and lone.get(measure):
                entry[measure.replace("_ms", "_vs_alone")] = round(entry[measure] / lone[measure], 3)
    return timed


def save(out: Path, result: dict) -> None:
    (out / "contention.json").write_text(json.dumps(result, indent=1) + "\n")


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
        print(json.dumps(time_one(args.time_one, args.repeats)))
        return 0
    result = run(args, shipped=shipped_table())
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
