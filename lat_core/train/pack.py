"""CLI: ``python -m lat_core.train.pack --job-ids I,.. --attempts N,.. --modes M,.. JOB_DIR...``

A warm pack (plan ``slurm.pack``): one Slurm job holding several jobs that do not fuse. This
process imports the training stack once (:func:`lat_core.train.warm.preload`), then forks each
member as the engine's preloaded process forks a job locally (:func:`lat_core.train.warm.become_runner`):
its own session, its ``train.log``, its environment (``LAT_JOB_ID``, ``LAT_ATTEMPT``, and its own
share of the allocation's GPUs), its trainer, and a runner that writes its exit record
``JOB_DIR/.lat/attempt-N.exit.json``. ``--modes``: each member's ``fresh``, ``resume`` or ``overwrite``.

While members run: a member whose cancel marker appears (the engine's cancel) gets SIGTERM, alone,
as a job alone does; SIGUSR1 (Slurm's warning before the time limit) and SIGTERM reach every member,
which saves and exits 75, or stops, as a job alone does (a warning that came while the pack imported
is inherited by each member's trainer, which saves at its first step; a stop then starts no member).
A member cancelled before the pack started is not started (its exit record says so). Exit status: 0 when every member finished, 75 when the
others finished and some saved to resume, else 1.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import warnings
from pathlib import Path

from lat_core.contract.jobdir import AttemptFiles, ExitRecord, JobDir
from lat_core.contract.jobdir.names import JOB_YAML, TRAIN_LOG
from lat_core.contract.jobdir.outcome import CANCELLED_RC, EXIT_SAVED_TO_RESUME
from lat_core.contract.trainer_modes import TRAINER_MODES
POLL_S = 0.5  # how often cancel markers are read and ended members reaped


def _numbers(text: str) -> list[int]:
    try:
        return [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 12,13, got {text!r}") from None


def _modes(text: str) -> list[str]:
    words = text.split(",")
    if any(w not in TRAINER_MODES for w in words):
        raise argparse.ArgumentTypeError(f"expected modes among {', '.join(TRAINER_MODES)}, got {text!r}")
    return words


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lat_core.train.pack", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job_dirs", nargs="+", type=Path, help="job folders, each holding job.yaml")
    p.add_argument("--job-ids", type=_numbers, required=True, help="the members' job ids, one per JOB_DIR")
    p.add_argument("--attempts", type=_numbers, required=True, help="the members' attempt numbers, one per JOB_DIR")
    p.add_argument("--modes", type=_modes, required=True, help="fresh, resume or overwrite, one per JOB_DIR")
    args = p.parse_args(argv)
    for name in ("job_ids", "attempts", "modes"):
        if len(getattr(args, name)) != len(args.job_dirs):
            p.error(f"--{name.replace('_', '-')} names {len(getattr(args, name))} value(s) "
                    f"for {len(args.job_dirs)} job folder(s)")
    return args


def split_gpus(visible: str | None, members: int) -> list[str | None]:
    """Each member's ``CUDA_VISIBLE_DEVICES``: an even share of the allocation's GPUs (Slurm's
    ``CUDA_VISIBLE_DEVICES``) in order; None (inherit) where the pack has no GPU list (a CPU pack)
    or fewer GPUs than members (they then share them, as they would a node)."""
    gpus = [g for g in (visible or "").split(",") if g.strip()]
    if not gpus or len(gpus) < members:
        return [None] * members
    each = len(gpus) // members
    return [",".join(gpus[i * each:(i + 1) * each]) for i in range(members)]


class Member:
    """One job of the pack: its folder, attempt and, once forked, its runner's pid."""

    def __init__(self, job_dir: Path, job_id: int, attempt: int, mode: str, gpus: str | None):
        self.job_dir, self.job_id, self.attempt, self.mode, self.gpus = job_dir, job_id, attempt, mode, gpus
        self.pid: int | None = None
        self.cancelled = False

    @property
    def exit_file(self) -> Path:
        return JobDir(self.job_dir).attempt(self.attempt).exit_path

    def request(self, environ: dict[str, str]) -> dict:
        """What the preloaded process's fork takes to become this member's runner."""
        env = {**environ, "LAT_JOB_ID": str(self.job_id), "LAT_ATTEMPT": str(self.attempt)}
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus
        return {"log": str(self.job_dir / TRAIN_LOG), "cwd": str(self.job_dir), "env": env,
                "exit_file": str(self.exit_file), "module": "lat_core.train",
                "args": ["--cfg", str(self.job_dir / JOB_YAML), *TRAINER_MODES[self.mode]], "show_env": ""}


def start(member: Member, save_asked: bool) -> None:
    """Fork the member's runner (its own session), or record its cancel where it came first.
    ``save_asked``: Slurm's warning (SIGUSR1) reached the pack before this fork; the trainer inherits
    the request and saves at its first step (a signal sent now could come before it listens)."""
    from lat_core.train import save_request
    from lat_core.train.warm import become_runner

    if JobDir(member.job_dir).cancel_requested():
        AttemptFiles(member.exit_file).write_exit(ExitRecord(CANCELLED_RC, pid=os.getpid(), ended=time.time(),
                                                             why="cancelled before its pack started"))
        print(f"[lat pack] job {member.job_id}: cancelled before it started", flush=True)
        return
    pid = os.fork()
    if pid == 0:
        save_request.install()  # the trainer's own handler, inherited: a warning is never USR1's default (death)
        if save_asked:
            save_request.ask()
        become_runner(member.request(dict(os.environ)))  # never returns
    member.pid = pid
    print(f"[lat pack] job {member.job_id}: forked (pid {pid}, GPUs {member.gpus or 'inherited'})", flush=True)


def forward(members: list[Member], signum: int) -> None:
    """Slurm's signal to the pack, passed on to each member's runner (which passes it to its trainer)."""
    for m in members:
        if m.pid is not None:
            try:
                os.kill(m.pid, signum)
            except ProcessLookupError:
                pass


def watch(members: list[Member]) -> None:
    """Until every forked member ended: SIGTERM to a member whose cancel marker appeared, once."""
    running = {m.pid: m for m in members if m.pid is not None}
    while running:
        for m in running.values():
            if not m.cancelled and JobDir(m.job_dir).cancel_requested():
                m.cancelled = True
                print(f"[lat pack] job {m.job_id}: cancelled", flush=True)
                forward([m], signal.SIGTERM)
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid in running:
            print(f"[lat pack] job {running.pop(pid).job_id}: ended", flush=True)
        elif pid == 0:
            time.sleep(POLL_S)


def exit_status(members: list[Member]) -> int:
    codes = [(r.returncode if (r := AttemptFiles(m.exit_file).read_exit()) else None) for m in members]
    if all(c == 0 for c in codes):
        return 0
    return EXIT_SAVED_TO_RESUME if all(c in (0, EXIT_SAVED_TO_RESUME) for c in codes) else 1


def main(argv=None) -> int:
    args = parse_args(argv)
    from lat_core.titles import set_title
    from lat_core.train.warm import PRELOAD, PreloadTouchedCuda, preload

    set_title(f"lat pack: jobs {','.join(map(str, args.job_ids))}")
    gpus = split_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), len(args.job_dirs))
    members = [Member(d.resolve(), i, n, mode, g)
               for d, i, n, mode, g in zip(args.job_dirs, args.job_ids, args.attempts, args.modes, gpus)]
    received: list[int] = []  # Slurm's signals: passed on to the members forked so far; later ones inherit a save request

    def on_signal(signum, _frame):
        received.append(signum)
        forward(members, signum)

    for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # before the imports too
        signal.signal(signum, on_signal)
    warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks", category=DeprecationWarning)
    started = time.time()
    try:
        preload()
    except PreloadTouchedCuda as exc:  # a forked member could not use the GPU: nothing is started
        print(f"[lat pack] cannot fork members: {exc}", flush=True)
        return 1
    print(f"[lat pack] preloaded {', '.join(PRELOAD)} in {time.time() - started:.1f}s; "
          f"forking jobs {', '.join(map(str, args.job_ids))}", flush=True)
    if any(signum != signal.SIGUSR1 for signum in received):  # stopped (scancel, preemption) while importing
        print("[lat pack] stopped before its members started", flush=True)
        return 1
    for member in members:
        start(member, signal.SIGUSR1 in received)
    watch(members)
    return exit_status(members)


if __name__ == "__main__":
    sys.exit(main())
