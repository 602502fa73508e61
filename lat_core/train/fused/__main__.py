"""CLI: `python -m lat_core.train.fused [--resume | --overwrite] [--attempt N | --attempts N,..] JOB_DIR...`

Trains the jobs prepared in JOB_DIR/job.yaml (as the engine writes them) as one fused group: one
process, one frozen base, each job's own events, train.log, checkpoints, evaluation and, with
--attempt, its exit record JOB_DIR/.lat/attempt-N.exit.json (--attempts: one N per JOB_DIR, in order,
as the engine launches a group whose members are on different attempts).  A job that cannot start (its
config, data, folder, adapter or checkpoint) or fails later fails alone, with its own reason in its
own files (exit 2 where a job of its own would refuse its config, else 1), and the others train.
SIGUSR1 (Slurm's warning before the time limit) makes every member save a checkpoint at its last
finished step and leave with exit 75 (EXIT_SAVED_TO_RESUME), to be resumed, as a job alone does. The
group's exit status is 0 when every member finished, 75 when the others finished and some saved to
resume, 2 when none could start, else 1.
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
    """(configs, outs) of the members whose config and folder can run; each of the others fails
    here, alone, with its own reason (failed_to_start)."""
    from lat_core.config.job import load_config
    from lat_core.contract.jobdir import JobDir
    from ..checkpoints import prepare_output_dir
    from ..record import write_env
    from .member_io import MemberOut
    from .trackers import MemberTrackers
    cfgs, outs = [], []
    for job_dir, attempt in zip(args.job_dirs, args.member_attempts):
        out = MemberOut(None, job_dir, None, attempt)
        try:
            out.cfg = load_config(str(JobDir(job_dir).job_yaml))
            prepare_output_dir(out.cfg.output_dir, args.resume, args.overwrite)
            out.events = JobDir(out.cfg.output_dir).event_writer()
            write_env(out.cfg, argv, args.resume)
            out.trackers = MemberTrackers(out.cfg)   # a tracker asked for and not installed: a config error, as alone
        except Exception as exc:  # noqa: BLE001 - its config or its folder: its own failure
            failed_to_start(out, exc)
            continue
        cfgs.append(out.cfg)
        outs.append(out)
    return cfgs, outs


def failed_to_start(out, exc: BaseException) -> None:
    """A member that cannot start: its failed event, error line and exit record (2 for a config
    refused, as a job alone exits; else 1), and a line in the group's output naming it."""
    from lat_core.config.job import TrainConfigError
    refused = isinstance(exc, TrainConfigError)
    out.record_failure(exc)
    out.exit(2 if refused else 1, "config error" if refused else f"could not start: {type(exc).__name__}")
    print(f"error: {out.job_dir}: {exc if refused else f'{type(exc).__name__}: {exc}'}", file=sys.stderr, flush=True)


def start_group(cfgs, outs, resume: bool, setup=None):
    """(group, members) ready to train, their started events written; None when no member can
    start.  A member that cannot (group.build_group's per-member checks, its started event or its
    tracker here) fails alone with its own reason; an error in what the members share (the base,
    the stacks) fails every member with it.  ``setup`` (a SetupPhases) laps the group's set-up, and
    each member's started event carries it, as a job alone's does."""
    import torch

    from ..record import add_data
    from .group import NoMemberStarts, build_group
    from .runner import make_member, started
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(max(c.train.num_threads for c in cfgs))
    try:
        group = build_group(cfgs, device, [resume] * len(cfgs), setup)
    except NoMemberStarts as exc:
        for i, out in enumerate(outs):
            failed_to_start(out, exc.failed[i])
        return None
    except Exception as exc:  # noqa: BLE001 - what every member shares: each fails with it
        for out in outs:
            failed_to_start(out, exc)
        return None
    members = []
    for i, out in enumerate(outs):
        if i in group.failed:
            failed_to_start(out, group.failed[i])
            continue
        j = group.members_of.index(i)
        try:
            add_data(out.cfg.output_dir, group.data[j].ds)
            member = make_member(group, j, out)
            started(member, group, resume, setup.phases if setup is not None else None)
        except Exception as exc:  # noqa: BLE001 - its folder, its tracker: its own failure
            group.runs[j].done = True   # in the stacks, never trained
            failed_to_start(out, exc)
            continue
        members.append(member)
    return (group, members) if members else None


def main(argv=None) -> int:
    t0 = time.time()
    from ..save_request import EXIT_SAVED_TO_RESUME, install
    install()  # before the heavy imports: Slurm's warning may come while they load (lat_core.train's main)
    args = parse_args(argv)
    set_title(f"lat {group_label(args.job_dirs)}")
    argv = list(sys.argv[1:] if argv is None else argv)
    from ..events import log
    from ..setup_phases import SetupPhases
    from .runner import train_group
    setup = SetupPhases(t0)
    cfgs, outs = open_members(args, argv)
    setup.lap("members")
    built = start_group(cfgs, outs, args.resume, setup) if cfgs else None
    if built is None:
        return 2
    group, members = built
    log(f"fused group of {len(members)}: {', '.join(m.run.cfg.name for m in members)} on {group.device.type}; "
        + group.modes.line() + f"; set up in {setup}")
    train_group(group, members)
    log(f"group wall time {time.time() - t0:.1f}s")
    if len(members) < len(args.job_dirs) or any(m.returncode not in (0, EXIT_SAVED_TO_RESUME) for m in members):
        return 1
    return EXIT_SAVED_TO_RESUME if any(m.returncode == EXIT_SAVED_TO_RESUME for m in members) else 0


if __name__ == "__main__":
    sys.exit(main())
