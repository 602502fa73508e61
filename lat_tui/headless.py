"""The headless front end: ``lat-tui --plan plan.yaml`` (or the seeds' flags).

It creates the run, makes sure a detached engine serves the state directory, and follows the
journal: one progress line per state change, a summary table at the end, exit code 0 only when
every job succeeded. Ctrl-C detaches without stopping anything; ``lat-tui status`` re-reads it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from lat_core.plan import Plan
from lat_core.service import EngineLock, create_run, ensure_engine, open_store, prepare_run
from lat_core.store import Store, Transition
from lat_tui.format import job_table, progress_line

EXIT_OK, EXIT_FAILED, EXIT_DETACHED = 0, 1, 130


def run_headless(plan: Plan, state_dir: Path, *, registry=None, probe=None, out: TextIO | None = None,
                 poll: float = 0.5) -> int:
    out = out or sys.stdout  # looked up at call time, so redirections apply
    prepared = prepare_run(plan, registry=registry, probe=probe)
    store = open_store(state_dir)
    run_id = create_run(store, prepared)
    run = store.run(run_id)
    print(f"run {run_id}: {len(prepared.jobs)} jobs on {_devices_text(run.devices)}; "
          f"outputs in {run.output_root}; journal {store.path}", file=out, flush=True)
    ensure_engine(state_dir, plan.env)
    try:
        return follow(store, run_id, state_dir, out=out, poll=poll, env=plan.env)
    except KeyboardInterrupt:
        print(f"\ndetached: the engine keeps running; `lat-tui status --state-dir {state_dir}` shows progress",
              file=out, flush=True)
        return EXIT_DETACHED


def follow(store: Store, run_id: int, state_dir: Path, *, out: TextIO, poll: float, env=None) -> int:
    """Print transitions until the run ends; restart the engine if it died (it adopts running jobs)."""
    last_id = 0
    started = store.run(run_id).created
    while True:
        for t in store.transitions(run_id, after_id=last_id):
            last_id = t.id
            _print_transition(store, t, started, out)
        run = store.run(run_id)
        if run.state in ("finished", "cancelled"):
            break
        if not EngineLock(state_dir).is_held():
            ensure_engine(state_dir, env)
        time.sleep(poll)
    return summarize(store, run_id, out)


def _print_transition(store: Store, t: Transition, started: float, out: TextIO) -> None:
    job = store.job(t.job_id) if t.job_id else None
    print(progress_line(t, job, started), file=out, flush=True)


def summarize(store: Store, run_id: int, out: TextIO) -> int:
    jobs = store.jobs(run_id)
    print("", file=out)
    print(job_table(jobs), file=out)
    bad = [j for j in jobs if j.state != "succeeded"]
    ok = len(jobs) - len(bad)
    print(f"\n{ok}/{len(jobs)} jobs succeeded", file=out, flush=True)
    for job in bad:
        print(f"  {job.state}: {job.key}  {job.error or ''}".rstrip(), file=out, flush=True)
    return EXIT_OK if not bad else EXIT_FAILED


def _devices_text(devices) -> str:
    return ", ".join(f"{d.id} x{d.slots}" for d in devices)
