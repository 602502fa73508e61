"""A stand-in trainer that leaves processes behind, for the process-tree tests.

    python tree_trainer.py --record DIR --name N --sleep S

It starts two heartbeating children, one in its own session (``setsid``: outside the job's process
group and session) and one plain, writes their pids and its own to DIR/N.pids, heartbeats itself
for S seconds, and exits 0 leaving both children running. Every process appends ``<t>`` lines to
DIR/N.<role>.beats, so tests measure from the processes' own clocks when each was alive.
"""

import argparse
import os
import subprocess
import sys
import time

BEAT_S = 0.05


def heartbeat(path: str, seconds: float) -> None:
    deadline = time.time() + seconds
    with open(path, "a") as fh:
        while time.time() < deadline:
            fh.write(f"{time.time()}\n")
            fh.flush()
            time.sleep(BEAT_S)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--record", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--sleep", type=float, default=0.5)
    p.add_argument("--beat", help="internal: be a child that heartbeats into this file")
    a = p.parse_args()
    if a.beat:
        heartbeat(a.beat, 600)
        return 0
    base = os.path.join(a.record, a.name)
    heartbeat(f"{base}.trainer.beats", 0.01)  # the first beat before any child exists
    me = [sys.executable, os.path.abspath(__file__), "--record", a.record, "--name", a.name]
    detached = subprocess.Popen([*me, "--beat", f"{base}.setsid.beats"], start_new_session=True)
    plain = subprocess.Popen([*me, "--beat", f"{base}.child.beats"])
    with open(f"{base}.pids.tmp", "w") as fh:
        fh.write(f"{os.getpid()} {detached.pid} {plain.pid}\n")
    os.replace(f"{base}.pids.tmp", f"{base}.pids")
    heartbeat(f"{base}.trainer.beats", a.sleep)
    return 0  # the children are left running on purpose


if __name__ == "__main__":
    sys.exit(main())
