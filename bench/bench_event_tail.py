"""How fast, and in how much memory, the engine reads a job's events.jsonl (lat_core.contract.jobdir).

    python bench/bench_event_tail.py [--steps 200000] [--huge-mb 100]

Writes two files in a temporary folder: ``--steps`` ordinary step events, and the same with one
line of ``--huge-mb`` MB in the middle (a trainer gone mad). Prints wall time and Python's peak
allocation for one full read of each, and the time of the read a restarted engine does for progress
(the last MiB).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

from lat_core.contract.jobdir import EventTail, last_progress


def write_events(path: Path, steps: int, huge_mb: int) -> None:
    with open(path, "wb") as fh:
        for step in range(1, steps + 1):
            fh.write(json.dumps({"t": 1.0, "event": "step", "step": step, "loss": 1.0 / step}).encode() + b"\n")
            if huge_mb and step == steps // 2:
                fh.write(b'{"event": "step", "blob": "' + b"x" * (huge_mb * 2**20) + b'"}\n')


def measure(path: Path) -> tuple[float, int, tuple, int]:
    """Wall time of one read, then (a second read, tracemalloc slows it) Python's peak allocation."""
    tail = EventTail(path)
    started = time.perf_counter()
    last = last_progress(tail.read())
    wall = time.perf_counter() - started
    tracemalloc.start()
    last_progress(EventTail(path).read())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return wall, peak, last, tail.skipped.count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--huge-mb", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, huge in (("plain", 0), ("with a huge line", args.huge_mb)):
            path = Path(tmp) / "events.jsonl"
            write_events(path, args.steps, huge)
            wall, peak, last, bad = measure(path)
            print(f"{name}: {path.stat().st_size / 2**20:.1f} MiB, whole file {wall:.2f} s, "
                  f"peak {peak / 2**20:.1f} MiB, last step {last}, bad lines {bad}")
        started = time.perf_counter()
        last = last_progress(EventTail.near_end(path).read())
        print(f"restarted engine's read (near the end): {time.perf_counter() - started:.3f} s, last step {last}")


if __name__ == "__main__":
    main()
