"""Control a live run from any shell; every command goes through the journal to the engine.

    lat-tui cancel JOB_ID | --run       lat-tui pause | resume
    lat-tui requeue JOB_ID [--remedy KEY]   lat-tui slots DEVICE N
    lat-tui countdown skip | extend MIN     lat-tui add --suite S --pairs P
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lat_core.errors import LatError
from lat_core.service import default_state_dir, ensure_engine, open_store

VERBS = ("cancel", "pause", "resume", "requeue", "slots", "countdown", "add")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir")
    common.add_argument("--run", type=int, dest="run_id", help="run id (default: the latest)")
    common.add_argument("--no-wait", action="store_true", help="do not wait for the engine's answer")
    p = argparse.ArgumentParser(prog="lat-tui", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    _add = sub.add_parser
    sub.add_parser = lambda name, **kw: _add(name, parents=[common], **kw)  # every verb takes the common flags
    cancel = sub.add_parser("cancel", help="cancel a job (SIGTERM, SIGKILL after 10 s) or the whole run")
    cancel.add_argument("job", nargs="?", type=int)
    cancel.add_argument("--all", action="store_true", help="cancel the whole run")
    sub.add_parser("pause", help="stop admitting new jobs (running ones go on)")
    sub.add_parser("resume", help="admit jobs again")
    requeue = sub.add_parser("requeue", help="queue a finished, failed or cancelled job again")
    requeue.add_argument("job", type=int)
    requeue.add_argument("--remedy", help="apply this triage remedy (see `lat-tui triage`) first")
    slots = sub.add_parser("slots", help="change a device's slot count while the run goes on")
    slots.add_argument("device", help="device id as shown (gpu0, gpu3, cpu)")
    slots.add_argument("count", type=int)
    countdown = sub.add_parser("countdown", help="skip or extend the countdown")
    countdown.add_argument("action", choices=("skip", "extend"))
    countdown.add_argument("minutes", nargs="?", type=float, default=5.0)
    add = sub.add_parser("add", help="add jobs (another suite or pair) to a live run")
    add.add_argument("--suite", action="append", required=True)
    add.add_argument("--round", default="all")
    add.add_argument("--pairs", required=True)
    add.add_argument("--configs")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else default_state_dir()
    try:
        store = open_store(state_dir)
        run = store.run(args.run_id) if args.run_id else store.latest_run()
        if run is None:
            print(f"lat-tui: no run in {state_dir}")
            return 1
        verb, job_id, extra = command_for(args, store, run)
    except LatError as exc:
        print(f"lat-tui: {exc.title}: {exc}")
        return 2
    command_id = store.add_command(run.id, verb, job_id=job_id, **extra)
    ensure_engine(state_dir)  # an ended run has no engine; commands still need one to apply them
    return 0 if args.no_wait else _report(store, command_id)


def command_for(args, store, run) -> tuple[str, int | None, dict]:
    if args.verb == "cancel":
        if args.all or args.job is None:
            return "cancel_run", None, {}
        return "cancel_job", store.job(args.job).id, {}
    if args.verb in ("pause", "resume"):
        return args.verb, None, {}
    if args.verb == "requeue":
        return "requeue", store.job(args.job).id, ({"remedy": args.remedy} if args.remedy else {})
    if args.verb == "slots":
        return "set_slots", None, {"device": args.device, "slots": args.count}
    if args.verb == "countdown":
        return ("skip_countdown", None, {}) if args.action == "skip" else ("extend_countdown", None, {"minutes": args.minutes})
    from lat_core.config.paths import config_trees
    from lat_core.config.suites import SuiteRegistry
    from lat_core.service import jobs_to_add

    names = [n for chunk in args.suite for n in chunk.split()]
    jobs = jobs_to_add(run, names, args.round, args.pairs, SuiteRegistry(config_trees(args.configs)))
    return "add_jobs", None, {"jobs": jobs}


def _report(store, command_id: int, timeout: float = 15.0) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        row = store.command(command_id)
        if row["status"] != "pending":
            print(f"{row['verb']}: {row['status']} {row['result'] or ''}".rstrip())
            return 0 if row["status"] == "done" else 1
        time.sleep(0.2)
    print("sent; the engine has not answered yet (is it running? `lat-tui status`)")
    return 0
