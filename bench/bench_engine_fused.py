"""The engine on K tiny GLA jobs (real trainer, CPU, one device slot): ``fuse: true`` (one fused
process for the group) against ``fuse: false`` (one process per job, one after another), both in
one call, sides alternated.

    python bench/bench_engine_fused.py [--jobs 3] [--steps 6] [--repeats 1]

Prints each side's wall time from the first tick to a drained run, the ratio, and whether every
job's step losses agree between the sides (1e-5 relative). Whole-job time: process start, imports,
data, evaluation and checkpoints included, which is what a small job's user waits for.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lat_core.engine.loop import Engine  # noqa: E402
from lat_core.contract.journal import Store  # noqa: E402
from lat_core.contract.jobdir import Step  # noqa: E402
from tests.helpers.fused import events_of, job_dir, saved_tiny_base  # noqa: E402

CPU = {"id": "cpu", "label": "cpu", "slots": 1, "env": {"CUDA_VISIBLE_DEVICES": ""}}


def run_side(root: Path, base: Path, fuse: str, jobs: int, steps: int) -> tuple[float, dict]:
    store = Store(root / "state" / "journal.sqlite")
    run_id = store.create_run(f"fuse: {fuse}\nwarm_start: false\n", str(root / "out"), [CPU], 0.0)
    records = []
    for i in range(jobs):
        folder = job_dir(root / "out", f"j{i}", base, peft={"r": 2 ** (1 + i % 4), "alpha": 2 ** (2 + i % 4)},
                         train={"max_steps": steps, "eval_every": steps, "save_every": steps}, seed=i + 1)
        records.append({"key": f"j{i}", "suite": "b", "round": 1, "stem": f"j{i}", "seed": i + 1,
                        "dataset": "tiny-sst2", "job_dir": str(folder), "env": {},
                        "argv": [sys.executable, "-m", "lat_core.train", "--cfg", str(folder / "job.yaml")]})
    store.add_jobs(run_id, records)
    engine, t0 = Engine(store), time.perf_counter()
    while engine.tick():
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    states = {j.key: j.state for j in store.jobs(run_id)}
    assert set(states.values()) == {"succeeded"}, states
    return wall, {j.key: {e.step: e.loss for e in events_of(Path(j.job_dir), Step)} for j in store.jobs(run_id)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = saved_tiny_base(Path(tmp) / "base")
        walls = {"false": [], "true": []}
        losses = {}
        for r in range(args.repeats):
            for fuse in (("false", "true") if r % 2 == 0 else ("true", "false")):
                wall, losses[fuse] = run_side(Path(tmp) / f"{fuse}{r}", base, fuse, args.jobs, args.steps)
                walls[fuse].append(wall)
        same = all(abs(losses["true"][k][s] - v) <= 1e-5 * abs(v) for k, c in losses["false"].items()
                   for s, v in c.items())
    alone, fused = min(walls["false"]), min(walls["true"])
    print(f"{args.jobs} jobs x {args.steps} steps, CPU, 1 slot: fuse false {alone:.1f}s, fuse true {fused:.1f}s, "
          f"ratio {alone / fused:.2f}x; losses equal (1e-5 rel): {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
