"""A short description of the selected job under the table; a failed job's error in full."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from lat_core.contract.rows import JobSummary
from lat_tui.widgets.quiet import set_content


class JobDetail(Static):
    def show(self, job: JobSummary | None, name: str) -> None:
        self.set_class(bool(job and job.error), "-error")
        set_content(self, describe_job(job, name) if job else Text("no job selected"))


def describe_job(job: JobSummary, name: str) -> Text:
    """``name``: the job table's name for the job, untruncated."""
    head = [name, job.state]
    if job.returncode is not None:
        head.append(f"exit {job.returncode}")
    text = Text(" · ".join(head), style="bold")
    text.append("  enter: details", style="dim")
    if job.error:
        text.append(f"\n{job.error}")
    elif job.state == "queued" and job.waiting:
        text.append(f"\nwaiting: {job.waiting}")
    else:
        text.append(f"\n{job.job_dir}", style="dim")
    return text
