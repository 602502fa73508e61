"""Where a fused group's wall time went, by part of its loop, said in the group's log when it ends.

Why: a group that trains slower than its passes measured alone (bench_fused.py) is either host-bound
(building and queueing passes, logging, saving: the GPU waits for the host) or GPU-bound (the host
waits for the GPU when it reads a loss). With CUDA graphs a pass is queued in one launch, so the time
spent reading losses is the GPU's share; on the CPU every part runs where it is counted.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

PARTS = {   # short: the line is read in the TUI's log pane
    "passes": "building passes",         # forward, backward and optimizer steps, queued (run, on the CPU)
    "losses": "waiting on losses",       # the last pass's losses for its step events: waits for the GPU
    "evaluation": "evaluation",
    "bookkeeping": "events and saves",   # step events, logs, checkpoints, members' ends
}


@dataclass
class GroupClock:
    started: float = field(default_factory=time.perf_counter)
    passes: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0

    def line(self) -> str:
        wall = max(time.perf_counter() - self.started, 1e-9)
        shares = ", ".join(f"{PARTS[name]} {s:.1f} s ({100 * s / wall:.0f}%)" for name, s in self.seconds.items())
        per_pass = f", {1000 * wall / self.passes:.0f} ms a pass" if self.passes else ""
        return f"group loop: {self.passes} passes in {wall:.1f} s{per_pass}: {shares}"
