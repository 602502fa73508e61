"""``lat-tui status``: the state of a run, printed without the TUI (works over any SSH shell)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lat_core.errors import LatError
from lat_core.service import EngineLock, default_state_dir, ensure_engine, open_store
from lat_core.store import RUN_ACTIVE
from lat_tui.format import fmt_elapsed, job_table


def _revive(state_dir: Path, run) -> tuple[str, int]:
    """A dead engine of an active run is restarted (it adopts running jobs), or the reason it
    cannot and exit code 2."""
    if run.state not in RUN_ACTIVE:
        return "not running", 0
    try:
        ensure_engine(state_dir)
    except LatError as exc:
        return f"not running and cannot start: {exc}", 2
    return "restarted (it adopts the running jobs)", 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lat-tui status")
    parser.add_argument("--state-dir")
    parser.add_argument("--run", type=int, help="run id (default: the latest)")
    args = parser.parse_args(argv)
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else default_state_dir()
    store = open_store(state_dir)
    run = store.run(args.run) if args.run else store.latest_run()
    if run is None:
        print(f"no run in {state_dir}")
        return 1
    engine, code = ("running", 0) if EngineLock(state_dir).is_held() else _revive(state_dir, run)
    print(f"run {run.id}: {run.state}; engine {engine}; outputs in {run.output_root}")
    if error := store.engine_error(run.id):
        print(f"engine error: {error}")
    if run.state == "countdown":
        print(f"countdown: {fmt_elapsed(max(0.0, run.countdown_until - time.time()))} left")
    jobs = store.jobs(run.id)
    print(job_table(jobs))
    for job in jobs:
        if job.error:
            print(f"  {job.key}: {job.error}")
        elif job.state == "queued" and job.waiting:
            print(f"  {job.key}: waiting: {job.waiting}")
    return code
