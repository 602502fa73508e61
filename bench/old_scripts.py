"""The old launch scripts' scheduling, for comparison: fixed slots per GPU and a round barrier.

Jobs start in rounds of ``slots``; the next round starts only when every job of the current one
has exited, as the seeds' shell scripts did (``wait`` after each batch of background jobs). Each job
is the same trainer command LAT would run, so only the scheduling differs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def run_in_rounds(jobs, device_env: dict, slots: int) -> dict:
    """Run ``jobs`` (lat_core.front.jobs.JobSpec) in rounds; returns {job key: (start, end, returncode)}."""
    times = {}
    for first in range(0, len(jobs), slots):
        running: list = []
        try:  # the round's start is covered too: a stop or a failed start half-way leaves no trainer behind
            for job in jobs[first:first + slots]:
                _start(job, device_env, running)
            for job, proc, log, start in running:  # the barrier
                returncode = proc.wait()
                log.close()
                times[job.key] = (start, time.time(), returncode)
        except BaseException:  # the bench stopped (SIGTERM, Ctrl-C) or a trainer could not start
            stop_round([proc for _, proc, _, _ in running])
            raise
    return times


def _start(job, device_env: dict, running: list) -> None:
    """Starts ``job``'s trainer and adds it to ``running`` with no stop signal in between."""
    log = open(job.job_dir / "train.log", "ab")
    env = {**os.environ, **job.env, **device_env}
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        proc = subprocess.Popen(job.command(), cwd=job.job_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, held))
        running.append((job, proc, log, time.time()))
    except BaseException:
        log.close()
        raise
    finally:  # a stop that came meanwhile is raised here, and the trainer is already in the round
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


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
