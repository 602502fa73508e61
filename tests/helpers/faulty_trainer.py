"""A trainer that misbehaves on request, for the engine's fault tests: real process, real files.

    python faulty_trainer.py --record DIR --name NAME [--lines FILE] [--big-line-mb N] [--signal N]
                             [--sleep S] [--exit CODE]

It appends "start <t> <pid>" / "end <t>" to DIR/<NAME>.log (one start line per launch), copies the
raw bytes of FILE into ./events.jsonl (the job dir is the cwd), optionally writes one line of N MB,
then kills itself with signal N or exits with CODE.
"""

import argparse
import json
import os
import signal
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--record", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--lines", help="a file whose bytes go into events.jsonl as they are")
    p.add_argument("--big-line-mb", type=int, default=0)
    p.add_argument("--signal", type=int)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--exit", type=int, default=0)
    a = p.parse_args()
    log = os.path.join(a.record, f"{a.name}.log")
    with open(log, "a") as fh:
        fh.write(f"start {time.time()} {os.getpid()}\n")
    with open("events.jsonl", "ab") as ev:
        ev.write(json.dumps({"t": time.time(), "event": "step", "step": 1, "loss": 1.0}).encode() + b"\n")
        if a.lines:
            with open(a.lines, "rb") as src:
                ev.write(src.read())
        if a.big_line_mb:
            ev.write(b'{"event": "step", "blob": "')
            for _ in range(a.big_line_mb):
                ev.write(b"x" * 2**20)
            ev.write(b'"}\n')
        ev.write(json.dumps({"t": time.time(), "event": "step", "step": 9, "loss": 0.125}).encode() + b"\n")
    time.sleep(a.sleep)
    if a.signal:
        if a.signal not in (signal.SIGKILL, signal.SIGSTOP):  # those two keep their default anyway
            signal.signal(a.signal, signal.SIG_DFL)
        os.kill(os.getpid(), a.signal)
        time.sleep(0.5)  # a signal whose default is to ignore (SIGCHLD, SIGURG, ...) lets us go on
    with open(log, "a") as fh:
        fh.write(f"end {time.time()}\n")
    print(f"faulty trainer {a.name} exits {a.exit}", flush=True)
    return a.exit


if __name__ == "__main__":
    sys.exit(main())
