"""``python -m lat_core.engine --state-dir DIR``: the detached engine process (see :mod:`lat_core.service`)."""

from __future__ import annotations

import os
from pathlib import Path

from lat_core.engine.loop import Engine


def main(argv: list[str] | None = None) -> int:
    """Entry point of the detached engine process: lock, drain every active run, exit."""
    import argparse

    from lat_core.service import EngineLock, open_store

    parser = argparse.ArgumentParser(prog="lat_core.engine")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--poll", type=float, default=0.5)
    args = parser.parse_args(argv)
    lock = EngineLock(Path(args.state_dir))
    if not lock.acquire():
        print(f"another engine already serves {args.state_dir}; exiting", flush=True)
        return 0
    store = open_store(Path(args.state_dir))
    print(f"engine {os.getpid()} serving {args.state_dir}", flush=True)
    note_replacement(store, os.getpid())
    engine = Engine(store)
    while True:
        engine.run(poll_interval=args.poll)
        lock.release()
        # A front end may have added a run while we were finishing and saw our lock held.
        if not store.active_runs() or not lock.acquire(timeout=0.2):
            break
    print("no active run left; engine exits", flush=True)
    return 0


def note_replacement(store, pid: int) -> None:
    """An engine only exits once no run is active, so an active run whose jobs were launched
    before this process started lost its engine: say so in the run's history."""
    for run in store.active_runs():
        if any(job.attempts > 0 for job in store.jobs(run.id)):
            store.add_transition(run.id, None, "engine", f"engine {pid} started (replacing a dead one)")


if __name__ == "__main__":
    raise SystemExit(main())
