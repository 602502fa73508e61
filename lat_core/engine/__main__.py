"""``python -m lat_core.engine --state-dir DIR``: the detached engine process (see :mod:`lat_core.front.service`)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from lat_core.engine.loop import Engine
from lat_core.errors import LatError
from lat_core.contract.journal_faults import WalLost, explain, write_fault
from lat_core.contract.states import HistoryKind
from lat_core.titles import set_title


def main(argv: list[str] | None = None) -> int:
    """Entry point of the detached engine process: lock, drain every active run, exit."""
    import argparse

    from lat_core.contract.state_dir import JOURNAL_NAME, EngineElsewhere, EngineLock

    parser = argparse.ArgumentParser(prog="lat_core.engine")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--poll", type=float, default=0.5)
    args = parser.parse_args(argv)
    state_dir = Path(args.state_dir)
    set_title(f"lat engine: {state_dir}")
    lock = EngineLock(state_dir)
    try:
        lock.check_not_elsewhere()
    except EngineElsewhere as exc:  # not a fault of the state directory: nothing recorded in it
        print(f"engine {os.getpid()} not started: {exc}", flush=True)
        return 2
    try:
        if not lock.acquire():
            print(f"another engine already serves {args.state_dir}; exiting", flush=True)
            return 0
        lock.keep_fresh()
        _serve(state_dir, lock, args.poll)
    except (LatError, sqlite3.Error, OSError) as exc:
        code = _stop_on_fault(state_dir, explain(exc, state_dir / JOURNAL_NAME))
        if isinstance(exc, WalLost):  # closing the journal would checkpoint frames only this process
            os._exit(code)  # sees, then remove the -wal path, which may be another process's by now
        return code
    return 0


def _serve(state_dir: Path, lock, poll: float) -> None:
    from lat_core.contract.state_dir import open_store

    store = open_store(state_dir)
    print(f"engine {os.getpid()} serving {state_dir}", flush=True)
    _warn_if_shared(state_dir)
    note_replacement(store, os.getpid())
    engine = Engine(store)
    while True:
        _run_through_locks(engine, store.path, poll)
        lock.release()
        # A front end may have added a run, or a command (a requeue of an ended run), while we were
        # finishing and saw our lock held.
        if not (store.active_runs() or store.runs_with_pending_commands()) or not lock.acquire(timeout=0.2):
            break
    print("no active run left; engine exits", flush=True)


def _warn_if_shared(state_dir: Path) -> None:
    from lat_core.contract.filesystems import network_filesystem

    fstype = network_filesystem(state_dir)
    if fstype:
        print(f"engine {os.getpid()}: the state directory is on {fstype}, a network filesystem: the journal uses "
              "SQLite's rollback journal (DELETE) instead of WAL, and the engine lock names this host; a "
              "node-local --state-dir (LAT_STATE_DIR) is faster and safer", flush=True)


def _run_through_locks(engine: Engine, journal: Path, poll: float) -> None:
    """Drain the runs; a journal locked by another process past the timeout is waited out (said
    once in engine.log) instead of stopping the engine: the lock is someone's long transaction,
    not damage. Every other fault ends the engine (see ``_stop_on_fault``)."""
    waiting = False
    while True:
        try:
            engine.run(poll_interval=poll)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower():
                raise
            if not waiting:
                print(f"engine {os.getpid()}: {explain(exc, journal)}; waiting for it", flush=True)
            waiting = True
            time.sleep(poll)


def _stop_on_fault(state_dir: Path, fault) -> int:
    """A journal or disk fault stops the engine with one line (no traceback) and a record that
    the next front end prints instead of restarting it in a loop; running jobs go on."""
    message = f"{fault.where}: {fault.message}" if fault.where else fault.message
    try:
        print(f"engine {os.getpid()} stopped: {message}", flush=True)
    except OSError:
        pass  # engine.log is on the full or read-only disk too
    write_fault(state_dir, message)
    return 2


def note_replacement(store, pid: int) -> None:
    """An engine only exits once no run is active, so an active run whose jobs were launched
    before this process started lost its engine: say so in the run's history."""
    for run in store.active_runs():
        if any(job.attempts > 0 for job in store.jobs(run.id)):
            store.add_transition(run.id, None, HistoryKind.ENGINE, f"engine {pid} started (replacing a dead one)")


if __name__ == "__main__":
    raise SystemExit(main())
