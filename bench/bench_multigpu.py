"""Jobs across GPUs through the engine (torchrun, NCCL): tokens/s per GPU on 1 GPU and on N.

    python bench/bench_multigpu.py --kind pretrain [--gpus 0,1] [--iterations 30]
    python bench/bench_multigpu.py --kind lora [--gpus 0,1] [--steps 30]

``pretrain``: the conservative preset (depth 12, device batch 8, total batch 24,576 tokens, seq
1,536) of ``python -m lat_core.train.pretrain``. ``lora``: the GLA-1.3B-shaped random-weight LoRA
job of bench/configs/gla13b_random_lora_r8.yaml. Each runs first on one GPU, then with
``gpus_per_job`` = all the GPUs given, both through the real engine (gang scheduling, rendezvous
port probing, torchrun) in the same call. tokens/s is the median over the step events after the
first two (compile and warm-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lat_core.front.devices import resolve_devices  # noqa: E402
from lat_core.engine.loop import Engine  # noqa: E402
from lat_core.monitor.gpu import GpuProbe  # noqa: E402
from lat_core.front.plan import Plan  # noqa: E402
from lat_core.contract.jobdir import JobDir, Step  # noqa: E402
from lat_core.contract.journal import Store  # noqa: E402


TINY_PRETRAIN = ["--depth=2", "--model_dim_per_layer=32", "--head_dim=32", "--seq_len=32", "--device_batch_size=2",
                 "--total_batch_size=128"]


def job_record(kind: str, job_dir: Path, world: int, args) -> dict:
    if kind == "pretrain":
        argv = [sys.executable, "-m", "lat_core.train.pretrain", "--preset", "conservative", "--output-dir",
                str(job_dir), f"--num_iterations={args.iterations}", f"--eval_every={args.iterations}",
                f"--save_every={args.iterations}", "--eval_tokens=24576"]
    else:
        config = yaml.safe_load((ROOT / "bench/configs/gla13b_random_lora_r8.yaml").read_text())
        config["train"].update(max_steps=args.steps, log_every=1, eval_every=args.steps, save_every=args.steps)
        config["output_dir"] = str(job_dir)
        if args.cpu:
            config["model"].update(dtype="float32", tiny={"hidden_size": 32, "num_hidden_layers": 1, "num_heads": 2})
        (job_dir / "job.yaml").write_text(yaml.safe_dump(config))
        argv = [sys.executable, "-m", "lat_core.train", "--cfg", str(job_dir / "job.yaml")]
    if args.cpu:
        argv += TINY_PRETRAIN if kind == "pretrain" else []
    return {"key": f"{kind}_w{world}", "suite": "bench", "round": 1, "stem": f"{kind}_w{world}", "seed": 1,
            "dataset": "tiny-corpus" if kind == "pretrain" else "tiny-sst2", "job_dir": str(job_dir),
            "argv": argv, "env": {}, "world": world}  # jobs inherit this environment (PYTHONPATH too)


def run_one(kind: str, gpus: list[int], out: Path, args) -> dict:
    world = len(gpus)
    if args.cpu:  # a dry run of the machinery: ranks on CPU slots (gloo), tiny model
        devices = [{"id": "cpu", "label": "cpu", "slots": world, "env": {"CUDA_VISIBLE_DEVICES": ""}}]
    else:
        devices = resolve_devices(Plan(suites=["demo"], pairs=["1:tiny-sst2"], gpus=gpus, slots=1),
                                  GpuProbe().snapshot())
    job_dir = out / f"{kind}_w{world}"
    job_dir.mkdir(parents=True, exist_ok=True)
    store = Store(out / f"state_{kind}_w{world}" / "journal.sqlite")
    run_id = store.create_run(f"bench: {kind} on {gpus}", str(out), devices, 0.0)
    store.add_jobs(run_id, [job_record(kind, job_dir, world, args)])
    engine, start = Engine(store), time.time()
    while engine.tick():
        time.sleep(0.2)
    job = store.jobs(run_id)[0]
    history = [f"{t.new_state}: {t.detail}" for t in store.transitions(run_id, job_id=job.id)]
    rates = [e.tokens_per_s for e in JobDir(job_dir).read_events().of(Step)][2:]
    total = statistics.median(rates) if rates else 0.0
    return {"kind": kind, "gpus": gpus, "state": job.state, "wall_s": round(time.time() - start, 1),
            "tokens_per_s": round(total), "tokens_per_s_per_gpu": round(total / world),
            "history": history, "error": job.error}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["pretrain", "lora"], required=True)
    parser.add_argument("--gpus", default="0,1")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", default="/tmp/lat-multigpu-bench")
    parser.add_argument("--cpu", action="store_true", help="dry run on CPU slots with a tiny model (--gpus 0,1 = 2 ranks)")
    args = parser.parse_args()
    gpus = [int(g) for g in args.gpus.split(",")]
    rows = [run_one(args.kind, gpus[:1], Path(args.out), args), run_one(args.kind, gpus, Path(args.out), args)]
    for row in rows:
        print(json.dumps(row), flush=True)
    if all(r["tokens_per_s"] for r in rows):
        print(json.dumps({"kind": args.kind, "per_gpu_scaling": round(rows[1]["tokens_per_s_per_gpu"]
                                                                      / rows[0]["tokens_per_s_per_gpu"], 3)}))


if __name__ == "__main__":
    main()
