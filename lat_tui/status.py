"""``lat-tui status``: the state of a run, printed without the TUI (works over any SSH shell)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lat_core.errors import JournalError
from lat_core.front.client import job_log_path, last_log_line
from lat_tui.cli_common import EXIT_OK, EXIT_USAGE, cli_entry, client_for, state_flags
from lat_tui.columns import job_name, plain_table, run_state_text
from lat_tui.format import fmt_elapsed
from lat_tui.json_views import dumps, job_view, run_view


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui status", parents=[state_flags()],
                                description="a run's job table, without the TUI")
    p.add_argument("--json", action="store_true", help="print one JSON document (schema 1; see README)")
    return p


@cli_entry("lat-tui status")
def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    client = client_for(args)
    run = client.resolve_run(args.run_id)
    jobs = client.job_table(run.id)
    groups = client.fused_groups(run.id)
    engine, code = _engine_state(client, run)
    if args.json:
        families = client.model_families(jobs)
        print(dumps({"run": run_view(run, jobs), "engine_alive": client.engine_alive(),
                     "jobs": [job_view(j, group=groups.get(j.fused_group or ""), family=families.get(j.id))
                              for j in jobs]}))
        return code
    print(f"run {run.id}: {run_state_text(run, jobs)}{' (admission paused)' if run.paused else ''}; "
          f"engine {engine}; outputs in {run.output_root}")
    if error := client.engine_error(run.id):
        print(f"engine error: {error}")
    if run.paused and run.state in ("countdown", "running"):  # said once here; each queued job waits on it too
        print(f"paused: {client.pause_reason(run.id)}")
    if run.state == "countdown":
        print(f"countdown: {fmt_elapsed(max(0.0, run.countdown_until - time.time()))} left")
    families = client.model_families(jobs)
    print(plain_table(jobs, families, groups=groups))
    for job in jobs:
        for line in job_notes(job):
            print(f"  {job.id} {job_name(job, families.get(job.id))}: {line}")
    sys.stdout.flush()
    return code


def _engine_state(client, run) -> tuple[str, int]:
    """A dead engine of an active run is restarted (it adopts running jobs), or the reason it
    cannot and exit code 2."""
    try:
        return client.revive_engine(run), EXIT_OK
    except JournalError as exc:
        return f"not running and cannot start: {exc}", EXIT_USAGE


def job_notes(job) -> list[str]:
    """Why a job ended or waits; the log's last line on a line of its own, so it does not read as
    part of the cause."""
    if job.error:
        cause, last = split_last_log_line(job.error, Path(job.job_dir))
        return [cause] + ([f"last log line: {last}"] if last else [])
    if job.state == "queued" and job.waiting:
        return [f"waiting: {job.waiting}"]
    return []


def split_last_log_line(error: str, job_dir: Path) -> tuple[str, str]:
    """The stored reason ends with the log's last line when triage did not pin the cause
    (``killed by SIGKILL: step 305/400 loss 2.6676``); (cause, that line), or
    (error, "") when it does not end with it."""
    last = last_log_line(job_log_path(job_dir))
    if last and error.endswith(f": {last}"):
        return error[: -len(last) - 2], last
    return error, ""
