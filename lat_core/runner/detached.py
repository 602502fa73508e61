"""Detached job runner: ``python -m lat_core.runner --exit-file F -- argv...``.

Started by the engine as the leader of a new session with stdio in the job's ``train.log``. It runs
the trainer in its own process group, waits, and writes the exit record atomically (tmp + rename),
so the job's outcome survives the engine, the front end and an SSH drop. SIGTERM/SIGINT/SIGHUP
sent to the runner are passed on to the trainer, whose exit then gets recorded as usual. SIGUSR1
(Slurm's warning before a time limit) is caught from the runner's start and passed on once the
trainer takes it (a handler in place, or srun's blocked mask: :mod:`lat_core.signal_pass`): a warning that comes while the
trainer starts is kept, not its death.

``--wait-pid PID`` is the warm-start form (:mod:`lat_core.train.warm`): the trainer was forked,
already running, by the process that then exec'd this runner, so it is our child and we wait for
it instead of starting one. The header and the pid file were written before that fork.

A job is its whole process tree (:mod:`lat_core.containment`): the runner contains the trainer (a
cgroup of its own, else the runner as subreaper), and when the trainer ends it stops whatever the
job left running (``setsid`` children included) before it writes the exit record, so a recorded
exit means the tree is gone. How it was contained goes into the pid file, the log header and the
exit record.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from lat_core.containment import (TERM_GRACE_S, Containment, ContainmentError, contain, enter, job_oom_kills,
                                  release, stop_tree)
from lat_core.contract.jobdir import AttemptFiles, ExitRecord, PidRecord
from lat_core.errors import OutputPathError
from lat_core.safe_files import ensure_folder, job_folder_of
from lat_core.signal_pass import PassOn
from lat_core.titles import runner_title, set_title


def _own_start_time() -> float:
    import psutil

    return psutil.Process().create_time()


def _echo(command: list[str], names: str) -> None:
    """The header of each attempt in train.log: what ran, with which overrides (secrets masked)."""
    from lat_core.config.env import mask_env

    shown = mask_env({n: os.environ.get(n, "") for n in names.split(",") if n})
    print(f"[lat] {time.strftime('%Y-%m-%d %H:%M:%S')} start: {' '.join(command)}", flush=True)
    if shown:
        print("[lat] env overrides: " + " ".join(f"{k}={v}" for k, v in shown.items()), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lat_core.runner")
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--show-env", default="", help="comma-separated names of the job's env overrides")
    parser.add_argument("--wait-pid", type=int, help="wait for this already running child (warm start)")
    parser.add_argument("--started", type=float, help="when the warm-started attempt began")
    parser.add_argument("--containment", help="the warm-started attempt's containment (JSON)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    warning = _catch_the_warning()
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    set_title(runner_title(args.exit_file, command))
    if args.wait_pid:  # exec'd with SIGUSR1 held (lat_core.train.warm.become_runner): caught now, so let it in
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        containment = Containment.from_json(json.loads(args.containment)) if args.containment else None
        return _wait_for_child(args.wait_pid, args.exit_file, args.started or time.time(), containment, warning)
    if not command:
        parser.error("no command given after --")
    started = time.time()
    try:
        ensure_folder(Path(args.exit_file).parent, job_folder_of(Path(args.exit_file)))  # not made by the engine
    except (OSError, OutputPathError) as exc:  # a planted symlink: nothing starts, the log says why
        print(f"[lat] cannot keep the exit record: {exc}", flush=True)
        return 2
    containment = start_containment(args.exit_file, started)
    if containment is None:
        return 2
    write_pid_file(args.exit_file, containment)
    _echo(command, args.show_env)
    print(f"[lat] containment: {containment.describe()}", flush=True)
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, env={**os.environ, **containment.child_env()},
                             preexec_fn=lambda: enter(containment))
    _forward_signals(_sender(child.pid), warning, child.pid)
    child.returncode = 0  # reaped below by wait4, not by Popen (whose poll could steal the status)
    _finish(args.exit_file, child.pid, started, containment, warning)
    return 0


def start_containment(exit_file: str, started: float) -> Containment | None:
    """The attempt's containment; None (the reason in the log and the exit record, exit 2) when a
    forced one is impossible or ``LAT_CONTAINMENT`` names none: nothing is started then."""
    job, attempt = os.environ.get("LAT_JOB_ID"), os.environ.get("LAT_ATTEMPT")
    tag = f"job{job}-a{attempt}" if job and attempt else f"pid{os.getpid()}"
    try:
        return contain(tag)
    except (ContainmentError, OSError) as exc:
        print(f"[lat] cannot contain the job: {exc}", flush=True)
        AttemptFiles(exit_file).write_exit(ExitRecord(2, started=started, ended=time.time(),
                                                      why=f"cannot contain the job: {exc}"))
        return None


def write_pid_file(exit_file: str, containment: Containment, rss_at_fork: int = 0) -> None:
    """Who runs the attempt (this pid and its start time) and how its tree is contained, for an
    engine that lost the launch or finds the runner gone. ``rss_at_fork``: a warm-started job's
    resident memory when it was forked from the preloaded process, which the engine does not count
    as the job's (see lat_core.monitor.usage)."""
    AttemptFiles(exit_file).write_pid(PidRecord(os.getpid(), _own_start_time(), rss_at_fork, containment.to_json()))


def own_rss() -> int:
    """This process's resident memory in bytes (Linux /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _catch_the_warning() -> PassOn:
    """SIGUSR1 (a scheduler's warning before the time limit, the trainer's "save and stop") caught
    from here on, and passed on to the trainer once it takes it (signal_pass.takes; none is started yet)."""
    warning = PassOn(lambda: [], said=_said)
    signal.signal(signal.SIGUSR1, warning)
    return warning


def _said(pid: int, signum: int) -> None:
    print(f"[lat] {signal.Signals(signum).name} passed on to the trainer (pid {pid})", flush=True)


def _forward_signals(send, warning: PassOn, pid: int | None) -> None:
    """SIGTERM, SIGINT and SIGHUP to the trainer at once; SIGUSR1 once it takes it (``pid``: the
    trainer; None: the trainer is gone, and its pid may be a stranger's)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, _frame: send(signum))
    warning.retarget((lambda: [pid]) if pid is not None else (lambda: []))


def _sender(pid: int):
    def send(signum):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass  # exited, not yet reaped: wait4 collects it

    return send


def _wait_for_child(pid: int, exit_file: str, started: float, containment: Containment | None,
                    warning: PassOn) -> int:
    _forward_signals(_sender(pid), warning, pid)
    # a forked trainer's kernel peak is inherited over fork: the preloaded process's, not the job's
    _finish(exit_file, pid, started, containment, warning, kernel_peak=False)
    return 0


def _finish(exit_file: str, pid: int, started: float, containment: Containment | None, warning: PassOn,
            kernel_peak: bool = True) -> None:
    """Wait for the trainer, stop what the job left running, then record the exit: an exit record
    means that no process of the attempt is left."""
    returncode, max_rss = _wait(pid)
    max_rss = max_rss if kernel_peak else None
    _forward_signals(lambda signum: None, warning, None)  # the trainer's pid is free now: never signal a stranger
    stopped = stop_tree(containment, os.getpid(), _own_start_time(), grace_s=TERM_GRACE_S)
    if stopped:
        print(f"[lat] the trainer ended; stopped the {stopped} process(es) it left running", flush=True)
    oom_kills = job_oom_kills(containment)
    release(containment)
    AttemptFiles(exit_file).write_exit(ExitRecord(
        returncode, pid=pid, started=started, ended=time.time(), max_rss=max_rss, stopped=stopped,
        containment=containment.kind if containment else None, oom_kills=oom_kills))


def _wait(pid: int) -> tuple[int, int]:
    """The child's exit code (negative: killed by that signal) and its peak RSS in bytes. The peak
    comes from the kernel (wait4's rusage), so a job shorter than the engine's sampling interval
    still has a true one."""
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024  # Linux reports KiB
