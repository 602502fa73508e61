"""The old launch scripts' scheduling, for comparison: fixed slots per GPU and a round barrier.

Jobs start in rounds of ``slots``; the next round starts only when every job of the current one
has exited, as the seeds' shell scripts did (``wait`` after each batch of background jobs). Each job
is the same trainer command LAT would run, so only the scheduling differs.
"""

from __future__ import annotations

import os
import subprocess
import time


def run_in_rounds(jobs, device_env: dict, slots: int) -> dict:
    """Run ``jobs`` (lat_core.front.jobs.JobSpec) in rounds; returns {job key: (start, end, returncode)}."""
    times = {}
    for first in range(0, len(jobs), slots):
        running = []
        for job in jobs[first:first + slots]:
            log = open(job.job_dir / "train.log", "ab")
            env = {**os.environ, **job.env, **device_env}
            proc = subprocess.Popen(job.command(), cwd=job.job_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
            running.append((job, proc, log, time.time()))
        try:
            for job, proc, log, start in running:  # the barrier
                returncode = proc.wait()
                log.close()
                times[job.key] = (start, time.time(), returncode)
        except BaseException:  # the bench stopped (SIGTERM, Ctrl-C): its round's trainers stop with it
            stop_round([proc for _, proc, _, _ in running])
            raise
    return times


def stop_round(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM to each trainer still running, SIGKILL to those alive ``grace_s`` later."""
    alive = [p for p in procs if p.poll() is None]
    for proc in alive:
        proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in alive:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
