"""CLI: `python -m lat_core.train.fused [--resume | --overwrite] [--attempt N | --attempts N,..] JOB_DIR...`

Trains the jobs prepared in JOB_DIR/job.yaml (as the engine writes them) as one fused group: one
process, one frozen base, each job's own events, train.log, checkpoints, evaluation and, with
--attempt, its exit record JOB_DIR/.lat/attempt-N.exit.json (--attempts: one N per JOB_DIR, in order,
as the engine launches a group whose members are on different attempts).  A job whose config cannot run
(exit 2 as a job of its own) is left out and the others train; the group's exit status is 0 when
every member finished, 2 when none could start, else 1.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lat_core.titles import group_label, set_title


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lat_core.train.fused", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job_dirs", nargs="+", type=Path, help="job folders, each holding job.yaml")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="each member continues from its newest checkpoint")
    mode.add_argument("--overwrite", action="store_true", help="discard previous events and checkpoints")
    numbers = p.add_mutually_exclusive_group()
    numbers.add_argument("--attempt", type=int, default=None, help="write each member's exit record for this attempt")
    numbers.add_argument("--attempts", type=_attempt_list, default=None,
                         help="comma-separated attempt numbers, one per JOB_DIR, for the members' exit records")
    args = p.parse_args(argv)
    if args.attempts is not None and len(args.attempts) != len(args.job_dirs):
        p.error(f"--attempts names {len(args.attempts)} attempt(s) for {len(args.job_dirs)} job folder(s)")
    args.member_attempts = args.attempts or [args.attempt] * len(args.job_dirs)
    return args


def _attempt_list(text: str) -> list[int]:
    try:
        numbers = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected attempt numbers like 1,2,1, got {text!r}") from None
    if any(n < 1 for n in numbers):
        raise argparse.ArgumentTypeError(f"attempt numbers start at 1, got {text!r}")
    return numbers


def open_members(args, argv):
    """(configs, outs) of the members whose config and folder can run; the others get their failed
    event and exit record (2) here."""
    from lat_core.config.job import TrainConfigError, load_config
    from ..checkpoints import prepare_output_dir
    from ..events import EventWriter
    from ..record import write_env
    from .member_io import MemberOut
    from .trackers import MemberTrackers
    cfgs, outs = [], []
    for job_dir, attempt in zip(args.job_dirs, args.member_attempts):
        events = None
        try:
            cfg = load_config(str(job_dir / "job.yaml"))
            prepare_output_dir(cfg.output_dir, args.resume, args.overwrite)
            events = EventWriter(cfg.output_dir / "events.jsonl")
            write_env(cfg, argv, args.resume)
            trackers = MemberTrackers(cfg)   # a tracker asked for and not installed: a config error, as alone
        except TrainConfigError as exc:
            bad = MemberOut(None, job_dir, events or EventWriter(job_dir / "events.jsonl"), attempt)
            bad.events.emit("failed", error_type=type(exc).__name__, message=str(exc)[:2000])
            bad.log(f"error: {exc}")
            bad.exit(2, "config error")
            print(f"error: {job_dir}: {exc}", file=sys.stderr, flush=True)
            continue
        cfgs.append(cfg)
        outs.append(MemberOut(cfg, job_dir, events, attempt, trackers))
    return cfgs, outs


def start_group(cfgs, outs, resume: bool):
    """(group, members) ready to train, their started events written; None when the group cannot
    be built (every member then gets its failed event and exit record 2)."""
    import torch

    from lat_core.config.job import TrainConfigError
    from ..record import add_data
    from .group import build_group
    from .runner import make_member, started
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(max(c.train.num_threads for c in cfgs))
    try:
        group = build_group(cfgs, device, [resume] * len(cfgs))
    except TrainConfigError as exc:
        for out in outs:
            out.events.emit("failed", error_type=type(exc).__name__, message=str(exc)[:2000])
            out.log(f"error: {exc}")
            out.exit(2, "config error")
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return None
    members = []
    for j, out in enumerate(outs):
        add_data(out.cfg.output_dir, group.data[j].ds)
        members.append(make_member(group, j, out))
        started(members[-1], group, resume)
    return group, members


def main(argv=None) -> int:
    t0 = time.time()
    args = parse_args(argv)
    set_title(f"lat {group_label(args.job_dirs)}")
    argv = list(sys.argv[1:] if argv is None else argv)
    from ..events import log
    from .runner import train_group
    cfgs, outs = open_members(args, argv)
    built = start_group(cfgs, outs, args.resume) if cfgs else None
    if built is None:
        return 2
    group, members = built
    log(f"fused group of {len(members)}: {', '.join(c.name for c in cfgs)} on {group.device.type}; "
        + group.modes.line())
    train_group(group, members)
    log(f"group wall time {time.time() - t0:.1f}s")
    ok = all(m.returncode == 0 for m in members) and len(cfgs) == len(args.job_dirs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
