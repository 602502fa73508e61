"""How the engine's cost grows with the number of jobs in a run (issue "Nothing a job does can stall
the queue", item 7: work per tick proportional to active jobs).

    python bench/bench_engine_scale.py [--sizes 100,1000,10000] [--run-max 1000] [--slots 8] [--sleep 0.05]

For each size N, on a fresh state directory with a real SQLite journal:

1. plan expansion plus journal writes: a plan of the ``demo`` suite (2 configs) over N/2 pairs on the
   CPU through :func:`lat_core.front.service.prepare_run` and :func:`~lat_core.front.service.create_run` (job
   directories written, run and jobs inserted), wall and CPU time;
2. tick time with N queued: N fake-trainer jobs, ``--slots`` CPU slots taken by long-sleeping jobs
   after the first tick, then the wall time of one :meth:`Engine.tick` (median and max of
   ``--ticks``, usage sampling included whenever it is due) and its CPU time (median; on a shared
   machine the wall time also holds other processes' turns);
3. ``lat-tui status`` wall and CPU time on that journal (a fresh interpreter, as a user runs it);
4. engine CPU per job (sizes up to ``--run-max`` only: 10,000 real jobs through fake trainers take
   too long on a small machine): all N fake trainers (``--sleep``) run to completion by the
   in-process engine at the detached engine's poll interval; the process CPU time (user + system,
   children excluded) of the engine divided by N, and a check that nothing launched twice (one
   "start" line per trainer, one attempt per job, every job succeeded).

This machine's speed swings (a 2-core VM shared with other work: the same code measured 3.9-6.7 ms
per job on one day), so each per-job figure comes with two calibrations timed in the same process
just before and after the run, to read the figure against the machine's speed of the moment: the
CPU time of a fixed pure-Python workload (:func:`calibration_ms`) and of a fixed piece of kernel
work, files and processes (:func:`os_calibration_ms`). Neither follows every swing: the per-job
figure also grows with the run's wall time (each tick costs a little per running job), so compare
code only as alternating runs in one call (``--compare``).

    python bench/bench_engine_scale.py --compare REF [--pairs 3] [--compare-jobs 200]

measures only the engine CPU per job, alternately for the code at git ref REF (checked out into a
temporary worktree) and for this checkout (ref first in odd pairs, this first in even ones), each
run in a fresh interpreter with its own tree's ``lat_core`` (engine and runner), the same fake
trainer for both; one line per run, then the medians.

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# --compare runs this file with CODE_ENV naming another tree: its engine is measured, with this
# checkout's fake trainer and bench code
CODE_ENV = "LAT_BENCH_CODE"
CODE_ROOT = Path(os.environ.get(CODE_ENV, ROOT))
sys.path.insert(0, str(CODE_ROOT))

from lat_core.config.paths import config_trees  # noqa: E402
from lat_core.config.suites import SuiteRegistry  # noqa: E402
from lat_core.engine.loop import Engine  # noqa: E402
from lat_core.front.plan import plan_from_mapping  # noqa: E402
from lat_core.contract.states import RunState  # noqa: E402
from lat_core.front.service import EngineLock, create_run, prepare_run  # noqa: E402
from lat_core.contract.journal import Store  # noqa: E402

FAKE_TRAINER = ROOT / "tests" / "helpers" / "fake_trainer.py"
LAT_TUI = [sys.executable, "-c", "import sys; from lat_tui.cli import main; sys.exit(main())"]
POLL_S = 0.5  # the detached engine's default --poll


def cpu_device(slots: int) -> dict:
    return {"id": "cpu", "label": "cpu", "slots": slots, "env": {"CUDA_VISIBLE_DEVICES": ""}}


def time_plan_expansion(n: int, workdir: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of prepare_run + create_run of a demo-suite plan with n jobs (2 configs x
    n/2 pairs); the rest of the wall time is the file system's (3 files and a directory per job)."""
    registry = SuiteRegistry(config_trees())
    data = {"suites": [{"name": "demo", "rounds": "all"}], "pairs": [f"{i}:tiny-sst2" for i in range(1, n // 2 + 1)],
            "gpus": "cpu", "slots": 8, "countdown_minutes": 0, "output_root": str(workdir / "plan_out")}
    store = Store(workdir / "plan_state" / "journal.sqlite")
    t0, c0 = time.perf_counter(), time.process_time()
    plan = plan_from_mapping(data, registry, where="bench plan")
    create_run(store, prepare_run(plan, registry=registry, environ={}))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    return elapsed, cpu


def fake_jobs(n: int, workdir: Path, sleep: float) -> list[dict]:
    record = workdir / "record"
    record.mkdir(parents=True, exist_ok=True)
    jobs = []
    for i in range(n):
        name = f"j{i:05d}"
        job_dir = workdir / "out" / name
        job_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, str(FAKE_TRAINER), "--sleep", str(sleep), "--record", str(record), "--name", name]
        # a plan's jobs carry their model family in the journal (status names jobs by it)
        jobs.append({"key": name, "suite": "t", "round": 1, "stem": name, "seed": 1, "dataset": "tiny-sst2",
                     "job_dir": str(job_dir), "argv": argv, "env": {}, "family": "gla"})
    return jobs


def new_run(n: int, workdir: Path, slots: int, sleep: float) -> tuple[Store, int]:
    store = Store(workdir / "state" / "journal.sqlite")
    run_id = store.create_run("plan: bench", str(workdir / "out"), [cpu_device(slots)], 0.0)
    store.add_jobs(run_id, fake_jobs(n, workdir, sleep))
    return store, run_id


def time_ticks(n: int, workdir: Path, slots: int, ticks: int) -> tuple[float, float, float]:
    """(median wall, max wall, median CPU) seconds of one tick with ``slots`` long jobs running and
    n - slots queued. The CPU time is the engine's own work, whatever else the machine runs."""
    store, run_id = new_run(n, workdir, slots, sleep=120.0)
    engine = Engine(store)
    try:
        engine.tick()  # launches the first ``slots`` jobs
        times, cpu = [], []
        for _ in range(ticks):
            t0, c0 = time.perf_counter(), time.process_time()
            engine.tick()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            time.sleep(0.05)
        running = sum(1 for a in store.open_attempts(run_id) if a.pid)
        assert running == slots, f"expected {slots} running, found {running}"
    finally:
        for attempt in store.open_attempts(run_id):
            if attempt.pid:
                try:
                    os.killpg(attempt.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        engine.close()
        # an active run would make the ``lat-tui status`` timed next restart its engine (as the README
        # promises), which then ran the N queued 120-s jobs detached, under every later measurement
        store.set_run_state(run_id, RunState.CANCELLED, "bench: ticks measured")
    store.close()
    return statistics.median(times), max(times), statistics.median(cpu)


def time_status(state_dir: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of ``lat-tui status``, a fresh interpreter each time, best of 3.

    The sources are byte-compiled first, as pip does when it installs LAT: an editable checkout
    under PYTHONDONTWRITEBYTECODE would otherwise compile every module on every run."""
    for package in ("lat_core", "lat_tui"):
        compileall.compile_dir(str(ROOT / package), quiet=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    best, best_cpu = float("inf"), float("inf")
    for _ in range(3):
        t0, c0 = time.perf_counter(), children_cpu()
        subprocess.run([*LAT_TUI, "status", "--state-dir", str(state_dir)], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, children_cpu() - c0)
    if EngineLock(state_dir).is_held():
        raise SystemExit(f"lat-tui status started an engine in {state_dir}: later numbers would include it")
    return best, best_cpu


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_to_completion(n: int, workdir: Path, slots: int, sleep: float) -> tuple[float, float, str]:
    """(engine CPU ms per job, wall s, launch check) for n fake jobs run to the end."""
    store, run_id = new_run(n, workdir, slots, sleep)
    engine = Engine(store)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    engine.run(poll_interval=POLL_S)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    check = launch_check(store, run_id, workdir / "record", n)
    store.close()
    return cpu / n * 1000, wall, check


def calibration_ms() -> float:
    """CPU milliseconds of a fixed pure-Python workload (dict, string and integer work, like the
    engine's own): a yardstick for this machine's speed of the moment, not a property of LAT."""
    c0 = time.process_time()
    table: dict[str, int] = {}
    for i in range(200_000):
        key = f"job-{i % 997}"
        table[key] = table.get(key, 0) + (i * 7) % 13
    sorted(table.items(), key=lambda kv: kv[1])
    return (time.process_time() - c0) * 1000


def os_calibration_ms() -> float:
    """CPU milliseconds (this process's own, as the engine's figure) of a fixed piece of the kernel
    work the engine does per job: small files created, renamed and removed, short processes started
    and reaped. On this VM such work slows down with the host's load more than pure Python does."""
    with tempfile.TemporaryDirectory(prefix="lat-bench-calibration-") as tmp:
        c0 = time.process_time()
        for i in range(100):
            path = os.path.join(tmp, f"f{i}.json")
            with open(f"{path}.tmp", "w") as fh:
                fh.write("{}")
            os.replace(f"{path}.tmp", path)
            os.unlink(path)
        for _ in range(10):
            subprocess.run(["/bin/true"], check=True)
        return (time.process_time() - c0) * 1000


def measured_run(n: int, slots: int, sleep: float) -> dict:
    """Engine CPU per job for n fake jobs, with the calibrations before and after (best of the two
    readings each time: a reading only ever grows from other work)."""
    before = min(calibration_ms(), calibration_ms()), min(os_calibration_ms(), os_calibration_ms())
    with tempfile.TemporaryDirectory(prefix=f"lat-bench-run-{n}-") as tmp:
        per_job, wall, check = run_to_completion(n, Path(tmp), slots, sleep)
    after = min(calibration_ms(), calibration_ms()), min(os_calibration_ms(), os_calibration_ms())
    return {"per_job_ms": per_job, "wall_s": wall, "check": check, "calibration_ms": (before[0] + after[0]) / 2,
            "os_calibration_ms": (before[1] + after[1]) / 2,
            "code": str(Path(sys.modules[Engine.__module__].__file__).resolve().parents[2])}


def compare(ref: str, pairs: int, n: int, slots: int, sleep: float) -> int:
    """Engine CPU per job at ``ref`` and here, alternately, ``pairs`` times each (see the module
    docstring); the reference tree is a temporary git worktree, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="lat-bench-ref-") as tmp:
        ref_tree = Path(tmp) / "ref"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(ref_tree), ref], check=True,
                       stdout=subprocess.DEVNULL)
        try:
            rows = []
            for i in range(pairs):
                order = (("ref", ref_tree), ("this", ROOT))
                for side, tree in order if i % 2 == 0 else order[::-1]:  # neither side always runs first
                    result = _child_run(tree, n, slots, sleep)
                    rows.append((i + 1, side, result))
                    print(f"pair {i + 1} {side}: {result['per_job_ms']:.2f} ms per job, calibration "
                          f"{result['calibration_ms']:.0f} / {result['os_calibration_ms']:.1f} ms, run wall "
                          f"{result['wall_s']:.0f} s, {result['check']}", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref_tree)], check=False)
    print(f"\nengine CPU per job, {n} fake jobs, {slots} CPU slots, --sleep {sleep}; ref = {ref}, this = working tree\n")
    print("| pair | side | engine CPU per job | calibration: Python / OS | per job / Python calibration | run wall "
          "| launched once |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for pair, side, r in rows:
        print(f"| {pair} | {side} | {r['per_job_ms']:.2f} ms | {r['calibration_ms']:.0f} / {r['os_calibration_ms']:.1f} ms "
              f"| {r['per_job_ms'] / r['calibration_ms'] * 1000:.1f} per mille | {r['wall_s']:.0f} s | {r['check']} |")
    for side in ("ref", "this"):
        values = [r["per_job_ms"] for _, s, r in rows if s == side]
        ratios = [r["per_job_ms"] / r["calibration_ms"] * 1000 for _, s, r in rows if s == side]
        print(f"\n{side}: median {statistics.median(values):.2f} ms per job, "
              f"{statistics.median(ratios):.1f} per mille of the calibration", end="")
    print()
    return 0


def _child_run(tree: Path, n: int, slots: int, sleep: float) -> dict:
    """One measured run in a fresh interpreter whose ``lat_core`` (engine, and the runner it
    starts) is ``tree``'s."""
    env = {**os.environ, CODE_ENV: str(tree), "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--one-run", str(n), "--slots", str(slots), "--sleep", str(sleep)],
                         env=env, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if Path(result["code"]) != tree.resolve():
        raise SystemExit(f"the run meant for {tree} measured the engine of {result['code']}")
    return result


def launch_check(store: Store, run_id: int, record: Path, n: int) -> str:
    """'ok' when every job ran exactly once and succeeded, else what was wrong."""
    jobs = store.jobs(run_id)
    problems = []
    starts = {log.stem: log.read_text().count("start ") for log in record.glob("*.log")}
    twice = [k for k, c in starts.items() if c != 1]
    if twice:
        problems.append(f"{len(twice)} started != once")
    if len(starts) != n:
        problems.append(f"{n - len(starts)} never started")
    multi = [j.key for j in jobs if j.attempts != 1]
    if multi:
        problems.append(f"{len(multi)} with attempts != 1")
    bad = [j.key for j in jobs if j.state != "succeeded"]
    if bad:
        problems.append(f"{len(bad)} not succeeded")
    return "; ".join(problems) or "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--run-max", type=int, default=1000, help="largest size run to completion")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=0.05, help="fake trainer's duration, seconds")
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--compare", metavar="REF", help="only engine CPU per job, alternately at git ref REF and here")
    parser.add_argument("--pairs", type=int, default=3, help="with --compare: runs of each side")
    parser.add_argument("--compare-jobs", type=int, default=200, help="with --compare: jobs per run")
    parser.add_argument("--one-run", type=int, metavar="N", help=argparse.SUPPRESS)  # a child of --compare
    args = parser.parse_args()
    if args.one_run:
        print(json.dumps(measured_run(args.one_run, args.slots, args.sleep)))
        return 0
    if args.compare:
        return compare(args.compare, args.pairs, args.compare_jobs, args.slots, args.sleep)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"lat-bench-{n}-") as tmp:
            work = Path(tmp)
            plan_s, plan_cpu = time_plan_expansion(n, work)
            print(f"[{n}] plan expansion + journal: {plan_s:.2f} s, CPU {plan_cpu:.2f} s", file=sys.stderr, flush=True)
            tick_med, tick_max, tick_cpu = time_ticks(n, work / "ticks", args.slots, args.ticks)
            print(f"[{n}] tick: median {tick_med * 1000:.1f} ms, max {tick_max * 1000:.1f} ms, CPU {tick_cpu * 1000:.1f} ms",
                  file=sys.stderr, flush=True)
            status_s, status_cpu = time_status(work / "ticks" / "state")
            print(f"[{n}] lat-tui status: {status_s:.2f} s, CPU {status_cpu:.2f} s", file=sys.stderr, flush=True)
            if n <= args.run_max:
                run = measured_run(n, args.slots, args.sleep)
                run_cells = (f"{run['per_job_ms']:.1f} ms | {run['calibration_ms']:.0f} / {run['os_calibration_ms']:.1f} ms "
                             f"| {run['wall_s']:.0f} s | {run['check']}")
            else:
                run_cells = "not run (too slow here) | - | - | -"
            print(f"[{n}] run to completion: {run_cells}", file=sys.stderr, flush=True)
        rows.append(f"| {n:,} | {plan_s:.2f} s (CPU {plan_cpu:.2f}) | {tick_med * 1000:.1f} ms (max {tick_max * 1000:.1f}) "
                    f"| {tick_cpu * 1000:.1f} ms | {status_s:.2f} s (CPU {status_cpu:.2f}) | {run_cells} |")
    print(f"\n{args.slots} CPU slots; fake trainer --sleep {args.sleep}; engine poll {POLL_S} s\n")
    print("| jobs | plan expansion + journal | tick with N queued, slots busy: wall | tick: CPU | `lat-tui status` "
          "| engine CPU per job (run to completion) | calibration: Python / OS | run wall | launched once |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
