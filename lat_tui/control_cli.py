"""Control a live run from any shell; every command goes through the journal to the engine.

    lat-tui cancel JOB_ID | --all           lat-tui pause | resume
    lat-tui requeue JOB_ID [--remedy KEY] [--resume | --fresh]
    lat-tui requeue --failed [--run N] [--resume | --fresh]
    lat-tui slots DEVICE N                  lat-tui countdown skip | extend MIN
    lat-tui add --suite S --pairs P
"""

from __future__ import annotations

import argparse
import sys

from lat_core.contract.commands import (FRESH, RESUME, AddJobs, CancelJob, CancelRun, Command, ExtendCountdown, PauseRun,
                                        RequeueJob, RequeueJobs, ResumeRun, SetSlots, SkipCountdown)
from lat_core.front.client import Client, resumable_checkpoints
from lat_core.contract.rows import JobSummary, RunRow
from lat_tui.columns import job_name
from lat_tui.cli_common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, cli_entry, client_for, state_flags

VERBS = ("cancel", "pause", "resume", "requeue", "slots", "countdown", "add")
HELP = {
    "cancel": "cancel a job (SIGTERM, SIGKILL after 10 s), or the whole run with --all",
    "pause": "stop admitting queued jobs of an active run (running ones go on)",
    "resume": "admit queued jobs again",
    "requeue": "run an ended job again (a succeeded one from scratch; offers to resume from checkpoints), "
               "or with --failed every failed or cancelled job of the run",
    "slots": "change a device's slot count while the run goes on",
    "countdown": "skip or extend the countdown before the first launch",
    "add": "add jobs (another suite or pair) to a live run",
}


def build_parser(verb: str) -> argparse.ArgumentParser:
    """The parser of one control verb (``lat-tui VERB --help``)."""
    p = argparse.ArgumentParser(prog=f"lat-tui {verb}", parents=[state_flags()], description=HELP[verb])
    p.add_argument("--no-wait", action="store_true", help="do not wait for the engine's answer")
    if verb == "cancel":
        p.add_argument("job", nargs="?", type=int, help="job id (as in `lat-tui status`)")
        p.add_argument("--all", action="store_true", help="cancel the whole run: nothing new starts, running jobs stop")
    elif verb == "requeue":
        p.add_argument("job", nargs="?", type=int, help="job id (as in `lat-tui status`)")
        p.add_argument("--failed", action="store_true",
                       help="every failed or cancelled job of the run at once (all or none); each resumes "
                            "from its newest checkpoint-* where it has one, else starts fresh")
        p.add_argument("--remedy", help="apply this triage remedy (see `lat-tui triage`) first")
        start = p.add_mutually_exclusive_group()
        start.add_argument("--resume", action="store_const", const=RESUME, dest="start",
                           help="continue from the job's newest checkpoint-* (with --failed: the default)")
        start.add_argument("--fresh", action="store_const", const=FRESH, dest="start",
                           help="start over from step 0 (old checkpoints and events are cleared)")
    elif verb == "slots":
        p.add_argument("device", help="device id as shown (gpu0, gpu3, cpu)")
        p.add_argument("count", type=int, help="jobs at once on that device (0: none)")
    elif verb == "countdown":
        p.add_argument("action", choices=("skip", "extend"), help="skip: start now; extend: add MINUTES")
        p.add_argument("minutes", nargs="?", type=float, default=5.0, help="minutes to add (default 5)")
    elif verb == "add":
        p.add_argument("--suite", action="append", required=True, help="suite name (repeatable)")
        p.add_argument("--round", default="all", help="'all' or round numbers (default: all)")
        p.add_argument("--pairs", required=True, help="'seed:dataset' pairs, space-separated")
        p.add_argument("--configs", help="configs directory (default: the project's configs/)")
        p.add_argument("--after", action="append", default=[], metavar="JOB",
                       help="the added jobs start once job JOB succeeded, and are cancelled if it does not (repeatable)")
    return p


@cli_entry("lat-tui")
def main(argv: list[str]) -> int:
    """``argv`` starts with the verb."""
    args = build_parser(argv[0]).parse_args(argv[1:])
    args.verb = argv[0]
    if args.verb == "cancel" and args.job is None and not args.all:
        print("lat-tui cancel: name a job id, or --all to cancel the whole run", file=sys.stderr)
        return EXIT_USAGE
    if args.verb == "requeue" and (problem := requeue_usage(args)):
        print(f"lat-tui requeue: {problem}", file=sys.stderr)
        return EXIT_USAGE
    client = client_for(args)
    run = client.resolve_run(args.run_id)
    if args.verb == "requeue" and args.failed:
        return requeue_failed(client, run, args)
    if args.verb == "requeue" and args.remedy is None:   # a remedy decides how the job starts, as in the TUI
        job = client.job(args.job, run.id)
        offer = resume_offer(job, job_name(job, client.model_family(job)), args.start)
        if offer:
            print(offer)
            return EXIT_FAILED
    command_id = client.send(run, command_for(args, client, run))
    return EXIT_OK if args.no_wait else report(client, command_id)


def command_for(args, client: Client, run: RunRow) -> Command:
    """The command a control verb's arguments ask for (a job id is checked against the journal)."""
    if args.verb == "cancel":
        return CancelRun() if args.all else CancelJob(client.job(args.job, run.id).id)
    if args.verb in ("pause", "resume"):
        return PauseRun() if args.verb == "pause" else ResumeRun()
    if args.verb == "requeue":
        return RequeueJob(client.job(args.job, run.id).id, start=args.start, remedy=args.remedy or None)
    if args.verb == "slots":
        return SetSlots(args.device, args.count)
    if args.verb == "countdown":
        return SkipCountdown() if args.action == "skip" else ExtendCountdown(args.minutes)
    from lat_core.front.client import suite_registry

    names = [n for chunk in args.suite for n in chunk.split()]
    return AddJobs(tuple(client.jobs_to_add(run, names, args.round, args.pairs, suite_registry(args.configs),
                                            " ".join(args.after))))


def requeue_usage(args) -> str:
    """What is wrong with how ``requeue`` was called; "" when nothing is."""
    if args.failed and args.job is not None:
        return "name a job id or --failed, not both"
    if args.failed and args.remedy:
        return "--remedy applies to one job: `lat-tui requeue JOB_ID --remedy KEY`"
    return "" if args.failed or args.job is not None else "name a job id, or --failed for every failed or cancelled job"


def requeue_failed(client: Client, run: RunRow, args) -> int:
    """One command for the run's failed and cancelled jobs; the engine's answer says per job
    whether it resumes or starts fresh."""
    jobs = client.unfinished_jobs(run.id)
    if not jobs:
        print(f"run {run.id} has no failed or cancelled job; nothing was requeued")
        return EXIT_FAILED
    command_id = client.send(run, RequeueJobs(tuple(job.id for job in jobs), start=args.start))
    return EXIT_OK if args.no_wait else report(client, command_id)


def resume_offer(job: JobSummary, name: str, start: str | None) -> str | None:
    """A failed or cancelled job with checkpoints could continue where it stopped: say so and send
    nothing until the user picks --resume or --fresh."""
    if start is not None or job.state not in ("failed", "cancelled"):
        return None
    found = resumable_checkpoints(job.job_dir)
    if not found:
        return None
    step, path = found[-1]
    return (f"job {job.id} {name} has {len(found)} checkpoint(s), the newest {path.name} (step {step}); "
            f"nothing was requeued.\n"
            f"  lat-tui requeue {job.id} --resume   continue from {path.name}\n"
            f"  lat-tui requeue {job.id} --fresh    start over from step 0 (checkpoints are cleared)")


def report(client: Client, command_id: int, timeout: float = 15.0) -> int:
    row = client.wait_answer(command_id, timeout)
    if row is None:
        print("sent; the engine has not answered yet (is it running? `lat-tui status`)")
        return EXIT_OK
    print(f"{row.kind}: {row.status} {row.result}".rstrip())
    return EXIT_OK if row.status == "done" else EXIT_FAILED
