"""Detached job runner: ``python -m lat_core.runner --exit-file F -- argv...``.

Started by the engine as the leader of a new session with stdio in the job's ``train.log``. It runs
the trainer in its own process group, waits, and writes the exit record atomically (tmp + rename),
so the job's outcome survives the engine, the front end and an SSH drop. SIGTERM/SIGINT/SIGHUP
sent to the runner are passed on to the trainer, whose exit then gets recorded as usual.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def write_exit_record(path: str, record: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    started = time.time()
    write_exit_record(f"{args.exit_file}.pid", {"pid": os.getpid(), "pid_start": _own_start_time()})
    _echo(command, args.show_env)
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL)

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    returncode = child.wait()
    record = {
        "returncode": returncode,
        "signal": -returncode if returncode < 0 else None,
        "pid": child.pid,
        "started": started,
        "ended": time.time(),
    }
    write_exit_record(args.exit_file, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
