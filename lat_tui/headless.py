"""The headless front end: ``lat-tui --plan plan.yaml`` (or the seeds' flags).

It creates the run, makes sure a detached engine serves the state directory, and follows the
journal: one progress line per state change, a summary table at the end, exit code 0 only when
every job succeeded (or a sweep pruned it). Ctrl-C detaches without stopping anything; ``lat-tui
status`` re-reads it, ``lat-tui follow`` picks the stream up again.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TextIO

from lat_core.front.client import Client, plan_env_of
from lat_core.contract.rows import RunRow
from lat_core.contract.states import HistoryKind
from lat_tui.cli_common import EXIT_DETACHED, EXIT_FAILED, EXIT_OK
from lat_tui.columns import job_name, plain_table
from lat_tui.format import progress_line

if TYPE_CHECKING:  # a plan means pydantic: `wait` and `follow` never build one
    from lat_core.front.client import Plan

RUN_ENDED = ("finished", "cancelled")


def run_headless(plan: Plan, state_dir: Path, *, registry=None, probe=None, out: TextIO | None = None,
                 poll: float = 0.5) -> int:
    out = out or sys.stdout  # looked up at call time, so redirections apply
    client = Client(state_dir)
    run, prepared = client.new_run(plan, registry=registry, probe=probe)
    print(f"run {run.id}: {len(prepared.jobs)} jobs on {_devices_text(run.devices)}; "
          f"outputs in {run.output_root}; journal {client.journal_path}", file=out, flush=True)
    client.ensure_engine(plan.env)
    return follow_detachable(client, run.id, out=out, poll=poll)


def follow_detachable(client: Client, run_id: int, *, out: TextIO, poll: float = 0.5) -> int:
    """:func:`follow` until the run ends; Ctrl-C detaches (exit 130) and the run goes on."""
    try:
        return follow(client, run_id, out=out, poll=poll)
    except KeyboardInterrupt:
        print(f"\ndetached: the engine keeps running; `lat-tui status --state-dir {client.state_dir}` shows progress",
              file=out, flush=True)
        return EXIT_DETACHED


def follow(client: Client, run_id: int, *, out: TextIO, poll: float, after_id: int = 0) -> int:
    """Print transitions until the run ends; restart the engine if it died (it adopts running jobs)."""
    started = client.run(run_id).created
    said: set[str] = set()  # what a fused group's members share, said at the first of them
    for t in stream_history(client, run_id, poll=poll, after_id=after_id):
        if t.new_state == HistoryKind.FUSED:
            if t.detail in said:
                continue
            said.add(t.detail)
        job = client.job(t.job_id) if t.job_id else None
        name = job_name(job, client.model_family(job)) if job else ""
        print(progress_line(t, job, started, name), file=out, flush=True)
    return summarize(client, run_id, out)


def stream_history(client: Client, run_id: int, *, poll: float, after_id: int = 0,
                   until: Callable[[RunRow], bool] | None = None):
    """The run's history entries as they are written, until ``until(run)`` (default: the run
    ended); keeps an engine serving the run meanwhile."""
    until = until or (lambda run: run.state in RUN_ENDED)
    last_id = after_id
    while True:
        for t in client.history(run_id, after_id=last_id):
            last_id = t.id
            yield t
        run = client.run(run_id)
        if until(run):
            for t in client.history(run_id, after_id=last_id):  # what the last pass wrote
                yield t
            return
        if not client.engine_alive():
            client.ensure_engine(plan_env_of(run))
        time.sleep(poll)


def summarize(client: Client, run_id: int, out: TextIO) -> int:
    jobs = client.job_table(run_id)
    print("", file=out)
    families = client.model_families(jobs)
    print(plain_table(jobs, families, groups=client.fused_groups(run_id)), file=out)
    pruned = [j for j in jobs if j.state == "pruned"]  # the sweep's choice, not a failure
    bad = [j for j in jobs if j.state not in ("succeeded", "pruned")]
    earlier = [j for j in jobs if j.state == "succeeded" and j.attempts == 0]
    ok = len(jobs) - len(bad) - len(pruned)
    note = (f" ({len(earlier)} had succeeded in an earlier run and were not rerun; "
            f"--overwrite reruns them)") if earlier else ""
    note += f", {len(pruned)} pruned by the sweep" if pruned else ""
    print(f"\n{ok}/{len(jobs)} jobs succeeded{note}", file=out, flush=True)
    for job in bad:
        name = job_name(job, families.get(job.id))
        print(f"  {job.state}: {job.id} {name}  {job.error or ''}".rstrip(), file=out, flush=True)
    return EXIT_OK if not bad else EXIT_FAILED


def _devices_text(devices) -> str:
    return ", ".join(f"{d.id} x{d.slots}" for d in devices)


