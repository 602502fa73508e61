"""The line that closes an attempt's train.log (lat_core.contract.jobdir.closing_line), written by
the engine, which alone knows how every attempt ended: the trainer's own last words, a kill, a
cancel, a launch that failed, the engine's own failure to handle the job."""

from __future__ import annotations

from lat_core.contract.jobdir import JobDir, closing_line
from lat_core.contract.rows import JobSummary
from lat_core.errors import OutputPathError


def close_log(job: JobSummary, verdict: str, how: str, when: float, max_steps: int | None = None) -> None:
    """``[lat] <when> <verdict> at step <last>/<max_steps>: <how>`` at the end of the job's log."""
    try:
        JobDir(job.job_dir).append_log_line(closing_line(verdict, how, job.last_step, max_steps, when))
    except (OSError, OutputPathError):  # a folder gone, read-only or with a planted link: the journal has it
        pass
