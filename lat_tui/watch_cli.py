"""Waiting on a run from any shell: ``wait`` (quiet, for scripts) and ``follow`` (the headless
progress stream again). Both keep an engine serving the run, and end with headless' exit codes:
0 every job succeeded, 1 some failed or was cancelled, 130 Ctrl-C (the run goes on).

    lat-tui wait [JOB...] [--run N]         until those jobs (default: the run) have ended
    lat-tui follow [--run N]                the run's history so far, then live, then the summary
"""

from __future__ import annotations

import argparse
import sys
import time

from lat_core.front.client import JOB_FINAL, Client, plan_env_of
from lat_tui.cli_common import EXIT_DETACHED, EXIT_FAILED, EXIT_OK, cli_entry, client_for, state_flags
from lat_tui.columns import job_name
from lat_tui.headless import RUN_ENDED, follow_detachable

HELP = {
    "wait": "wait until jobs (default: the whole run) end; exit 0 all succeeded (or a sweep pruned them), 1 not, 130 Ctrl-C",
    "follow": "the headless progress stream of a run (its history so far, then live) and its summary",
}


def build_parser(verb: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"lat-tui {verb}", parents=[state_flags()], description=HELP[verb])
    if verb == "wait":
        p.add_argument("jobs", nargs="*", type=int, metavar="JOB", help="job ids (default: every job of the run)")
        p.add_argument("--quiet", action="store_true", help="print nothing; the exit code says it")
    p.add_argument("--poll", type=float, default=0.5, help=argparse.SUPPRESS)
    return p


@cli_entry("lat-tui")
def main(argv: list[str]) -> int:
    """``argv`` starts with the verb."""
    verb = argv[0]
    args = build_parser(verb).parse_args(argv[1:])
    client = client_for(args)
    if verb == "follow":
        run = client.resolve_run(args.run_id)
        return follow_detachable(client, run.id, out=sys.stdout, poll=args.poll)
    try:
        return wait(client, args)
    except KeyboardInterrupt:
        return EXIT_DETACHED


def wait(client: Client, args) -> int:
    if args.jobs:
        jobs = [client.job(j, args.run_id) for j in args.jobs]
        run = client.run(jobs[0].run_id)
        if any(j.run_id != run.id for j in jobs):
            raise_mixed(jobs)
    else:
        run = client.resolve_run(args.run_id)
    while True:
        jobs = _waited_jobs(client, run.id, args.jobs)  # no ids: the whole run, jobs added meanwhile too
        run = client.run(run.id)
        done = all(j.state in JOB_FINAL for j in jobs) and (args.jobs or run.state in RUN_ENDED)
        if done:
            break
        if not client.engine_alive():
            client.ensure_engine(plan_env_of(run))
        time.sleep(args.poll)
    bad = [j for j in jobs if j.state not in ("succeeded", "pruned")]  # a pruned point: the sweep's choice
    pruned = sum(j.state == "pruned" for j in jobs)
    if not args.quiet:
        print(f"{len(jobs) - len(bad) - pruned}/{len(jobs)} jobs succeeded"
              + (f", {pruned} pruned by the sweep" if pruned else ""))
        for job in bad:
            print(f"  job {job.id} {job.state}: {job_name(job, client.model_family(job))}  {job.error or ''}".rstrip())
    return EXIT_OK if not bad else EXIT_FAILED


def _waited_jobs(client: Client, run_id: int, ids: list[int]) -> list:
    """The waited-on jobs' rows from one read of the run's table (not one query per job)."""
    table = client.job_table(run_id)
    if not ids:
        return table
    by_id = {j.id: j for j in table}
    return [by_id[i] for i in ids]


def raise_mixed(jobs) -> None:
    from lat_core.errors import LatError

    runs = sorted({j.run_id for j in jobs})
    raise LatError(f"the jobs belong to runs {runs}; wait on one run's jobs at a time")
