"""Run creation is serialised per state directory, and a run never shares job folders with a live one.

Two front ends started with the same plan used to create two runs that launched every job twice
into the same folder. ``create.lock`` in the state directory makes check-then-create atomic across
processes: the first front end's run is written before the next one looks, and the next one is
refused, naming the live run, before it writes anything into a job folder.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lat_core.errors import JournalError, RunConflictError
from lat_core.contract.journal import Store

CREATE_LOCK_NAME = "create.lock"


@contextmanager
def creation_lock(state_dir: Path) -> Iterator[None]:
    """Held while one front end checks for conflicts and writes its run (other creators wait)."""
    path = Path(state_dir) / CREATE_LOCK_NAME
    try:
        fh = open(path, "a+")  # noqa: SIM115 - closed by the `with fh` below; opening gets its own message
    except OSError as exc:
        raise JournalError(f"cannot open the run-creation lock: {exc.strerror}", where=str(path)) from exc
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def check_no_live_overlap(store: Store, job_dirs: Iterable[Path | str]) -> None:
    """RunConflictError naming the live run when any of ``job_dirs`` belongs to one of its jobs."""
    wanted = {os.path.realpath(d) for d in job_dirs}
    for run in store.active_runs():
        shared = sorted(wanted & {os.path.realpath(j.job_dir) for j in store.jobs(run.id)})
        if shared:
            more = f" (and {len(shared) - 1} more)" if len(shared) > 1 else ""
            raise RunConflictError(
                f"run {run.id} ({run.state}) is live and owns {shared[0]}{more}; re-attach with `lat-tui` "
                f"or `lat-tui status --run {run.id}`, cancel it with `lat-tui cancel --all --run {run.id}`, "
                "or choose another output_root", where=run.output_root)
