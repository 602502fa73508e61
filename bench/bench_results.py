"""Time results aggregation on a synthetic output tree (default 2,000 job folders).

    python bench/bench_results.py [--jobs 2000] [--workers 4] [--steps 200] [--png]

Prints seconds for: building the tree, scanning it (serial and with workers), and writing the
tables (and plots with --png). Each job has one event per logged step, 10 evals, 10 checkpoints.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lat_core.results import aggregate, spec_for, write_report  # noqa: E402

DATASETS = ("glue-tvt_cola", "glue-tvt_sst2", "glue-tvt_mrpc", "glue-tvt_stsb", "samsum")


def job_events(dataset: str, seed: int, config: str, steps: int) -> str:
    metric = spec_for(dataset).main
    lines = [{"event": "started", "pid": 1, "config": config, "model": "gla", "seed": seed,
              "data": dataset, "trainable_params": 1000, "total_params": 100000}]
    lines += [{"event": "step", "step": s, "loss": 2.0 / s, "lr": 1e-4} for s in range(1, steps + 1)]
    every = max(1, steps // 10)
    for s in range(every, steps + 1, every):
        lines.append({"event": "eval", "step": s, "split": "validation",
                      "metrics": {metric: (s % 7 + seed) / 20, "loss": 1.0 / s}})
        lines.append({"event": "checkpoint", "step": s, "path": f"checkpoint-{s}"})
    lines += [{"event": "memory", "peak_rss_bytes": 2**31, "peak_gpu_bytes": 2**33},
              {"event": "finished", "status": "ok", "steps": steps}]
    return "".join(json.dumps({"t": 1.0, **line}) + "\n" for line in lines)


def job_yaml(dataset: str, seed: int, config: str, job_dir: Path) -> str:
    return (f"name: {config}\ndata: {dataset}\nseed: {seed}\nmodel:\n  family: gla\n  name_or_path: tiny\n"
            f"peft:\n  method: lora\n  r: 8\ntrain:\n  lr: 0.0001\n  max_steps: 200\n"
            f"output_dir: {job_dir}\n")


def build_tree(root: Path, jobs: int, steps: int) -> None:
    configs = max(1, jobs // (len(DATASETS) * 5))
    made = 0
    for seed in range(1000):
        for dataset in DATASETS:
            for c in range(configs):
                if made == jobs:
                    return
                job_dir = root / f"{dataset}_seed{seed}" / f"cfg{c:03d}"
                job_dir.mkdir(parents=True)
                (job_dir / "job.yaml").write_text(job_yaml(dataset, seed, f"cfg{c:03d}", job_dir))
                (job_dir / "events.jsonl").write_text(job_events(dataset, seed, f"cfg{c:03d}", steps))
                made += 1


def timed(label: str, fn):
    start = time.perf_counter()
    value = fn()
    print(f"{label}: {time.perf_counter() - start:.2f} s")
    return value


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--png", action="store_true", help="also time the plots")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        timed(f"build {args.jobs} job folders", lambda: build_tree(root, args.jobs, args.steps))
        report = timed("aggregate (serial)", lambda: aggregate(root))
        timed(f"aggregate (workers={args.workers})", lambda: aggregate(root, workers=args.workers))
        formats = {"csv", "json", "md"} | ({"png"} if args.png else set())
        timed(f"write {','.join(sorted(formats))}", lambda: write_report(report, Path(tmp) / "out", formats))
        print(f"jobs aggregated: {len(report.results)}, skipped: {len(report.skipped)}")
        return 0 if len(report.results) == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
