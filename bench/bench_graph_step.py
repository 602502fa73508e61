"""One small job alone: milliseconds per optimizer step, eager (today's trainer) against the new
speed modes, in one call.

    python bench/bench_graph_step.py [--steps 60] [--data tiny|long] [--sides eager,graphs,pack]

The job is gla_rank_sweep's LoRA r8 q/k/v/o config on the GLA-1.3B architecture with random weights
(bench_suite_throughput.MODEL_1B3), its hyperparameters unchanged (batch 8 x accumulation 2, seq 256,
bf16) except the number of steps, on the shipped SST-2 sample (short sentences) or --data long
(every example fills the 256 tokens).  Sides, each its own trainer process (python -m lat_core.train):

- ``eager``: train.graphs false, train.pack false (the trainer before issue 17);
- ``pack``: graphs false, packing on (fla varlen, one row per micro-batch);
- ``graphs``: graphs auto (opt-in: captured steps);
- ``eager-again``: the eager side once more: its loss check is the run-to-run spread of the eager
  trainer itself (fla's backward kernels accumulate in a nondeterministic order), the floor the
  other sides' checks are read against;
- ``eager-nudged``: eager with the learning rate 1e-3 larger (relative), a perturbation of the
  size of bf16 rounding: its loss check says how far this run's curve carries a rounding-sized
  difference, the bound a correct but differently rounded step (graphs, packing) can be held to.

Per-step time comes from the job's own step events (logged every 10 steps) between step 20 and the
last logged step, so start-up, the first captures and the final evaluation are left out.  The loss
check compares each side's logged losses with the eager side's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_suite_throughput import MODEL_1B3  # noqa: E402
from bench.suite_data import write_sst2  # noqa: E402
from lat_core.contract.jobdir import JobDir, Memory, Started, Step  # noqa: E402

CONFIG = ROOT / "configs/experiments/gla13b/rank/lora_qkvo_r8_a16.yaml"
SIDES = {"eager": {"graphs": False, "pack": False}, "eager-again": {"graphs": False, "pack": False},
         "eager-nudged": {"graphs": False, "pack": False},
         "pack": {"graphs": False, "pack": True},
         "graphs": {"graphs": "auto", "pack": "auto"}}
LR_NUDGE = {"eager-nudged": 1 + 1e-3}
LOG_EVERY, FROM_STEP = 10, 20


def job_file(out: Path, side: str, steps: int, data: str, dtype: str) -> Path:
    raw = yaml.safe_load(CONFIG.read_text())
    raw["model"].update(MODEL_1B3, dtype=dtype)
    raw["train"].update(max_steps=steps, eval_every=steps, save_every=steps, log_every=LOG_EVERY,
                        warmup_steps=0, **SIDES[side])
    raw["train"]["lr"] *= LR_NUDGE.get(side, 1.0)
    raw.update(name=side, data=data, output_dir=str(out / side), resolved=True)
    (out / side).mkdir(parents=True, exist_ok=True)
    path = out / side / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def run_side(out: Path, side: str, steps: int, data: str, env: dict, timeout: float, dtype: str) -> dict:
    path = job_file(out, side, steps, data, dtype)
    log = out / side / "stdout.log"
    with log.open("w") as fh:   # streamed, so a side stopped at its timeout still shows how far it got
        try:
            rc = subprocess.run([sys.executable, "-m", "lat_core.train", "--cfg", str(path), "--overwrite"],
                                cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = f"timeout after {timeout} s"
    if rc != 0:
        return {"side": side, "error": f"{rc}: {log.read_text()[-1500:]}"}
    events = JobDir(out / side).read_events()
    steps_ev = events.of(Step)
    mid = [e for e in steps_ev if e.step >= FROM_STEP]
    ms = (mid[-1].t - mid[0].t) / (mid[-1].step - mid[0].step) * 1000
    tokens = sum(e.tokens for e in mid[1:])
    started = events.of(Started)[0]
    peak = next((e.peak_gpu_bytes or 0 for e in events.of(Memory)), 0)
    return {"side": side, "ms_per_step": round(ms, 1), "tokens_per_s": round(tokens / (mid[-1].t - mid[0].t)),
            "peak_gpu_gib": round(peak / 2**30, 2), "graphs": asdict(started.graphs) if started.graphs else None,
            "pack": asdict(started.pack) if started.pack else None, "losses": {e.step: e.loss for e in steps_ev}}


def loss_check(ref: dict, got: dict) -> dict:
    worst = max(abs(got[s] - ref[s]) / max(abs(ref[s]), 1e-6) for s in ref if s in got)
    return {"max_rel_diff": round(worst, 5), "ok": worst <= 1e-2}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--data", choices=["tiny", "long"], default="tiny")
    parser.add_argument("--sides", default="eager,graphs,pack")
    parser.add_argument("--out", default="/tmp/lat-graph-step")
    parser.add_argument("--side-timeout", type=float, default=600)
    parser.add_argument("--dtype", default="bfloat16",
                        help="float32 separates layout/graph differences from bf16 rounding in the loss check")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = Path(args.out)
    env = dict(os.environ)
    data = "tiny-sst2"
    if args.data == "long":
        env["GLUE_LOCAL_DIR"] = str(write_sst2(out / "glue"))
        data = "glue-tvt_sst2"
    rows = []
    for side in args.sides.split(","):
        rows.append(run_side(out, side, args.steps, data, env, args.side_timeout, args.dtype))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "losses"}), flush=True)
    eager = next((r for r in rows if r["side"] == "eager" and "error" not in r), None)
    for r in rows:
        if eager is not None and r is not eager and "error" not in r:
            r["speedup_vs_eager"] = round(eager["ms_per_step"] / r["ms_per_step"], 2)
            r["loss_check_vs_eager"] = loss_check(eager["losses"], r["losses"])
    summary = [{k: v for k, v in r.items() if k not in ("losses", "graphs", "pack")} for r in rows]
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
