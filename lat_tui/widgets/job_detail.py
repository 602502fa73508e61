"""A short description of the selected job under the table; a failed job's error in full."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from rich.text import Text
from textual.widgets import Static

from lat_core.contract.rows import JobSummary
from lat_tui.widgets.quiet import set_content


# how the engine names another job in a waiting reason: ``job 12 (gla/lora_r8 1:sst2)``
NAMED_JOB = re.compile(r"\bjob (\d+) \(")


class JobDetail(Static):
    def show(self, job: JobSummary | None, name: str, table_names: Mapping[int, str] | None = None,
             full_name: Callable[[int], str | None] | None = None) -> None:
        """``table_names`` and ``full_name``: each job's name in the table, and whole (see
        ``describe_job``)."""
        self.set_class(bool(job and job.error), "-error")
        text = describe_job(job, name, _in_table_names(table_names or {}, full_name)) if job else None
        set_content(self, text or Text("no job selected"))


def describe_job(job: JobSummary, name: str, shorten: Callable[[str], str] = str) -> Text:
    """``name``: the job table's name for the job, untruncated. ``shorten``: a waiting reason with
    the jobs it names as the table names them (a whole name can push what tells it apart off the
    screen's edge)."""
    head = [name, job.state]
    if job.returncode is not None:
        head.append(f"exit {job.returncode}")
    if job.attempts > 1:  # a narrow table has no ``try`` column
        head.append(f"attempt {job.attempts}")
    text = Text(" · ".join(head), style="bold")
    text.append("  enter: details", style="dim")
    if job.error:
        text.append(f"\n{job.error}")
    elif job.state == "queued" and job.waiting:
        reason = shorten(job.waiting)
        text.append("\n" + (reason if reason.startswith("waiting") else f"waiting: {reason}"))
    else:
        text.append(f"\n{job.job_dir}", style="dim")
    return text


def _in_table_names(table_names: Mapping[int, str], full_name: Callable[[int], str | None] | None
                    ) -> Callable[[str], str]:
    """A waiting reason's ``job N (whole name)`` as ``job N (table's name)``."""
    def shorten(reason: str) -> str:
        for match in reversed(list(NAMED_JOB.finditer(reason))):  # from the end: places stay put
            job_id = int(match.group(1))
            whole, short = full_name(job_id) if full_name else None, table_names.get(job_id)
            if whole and short and reason.startswith(f"{whole})", match.end()):
                reason = reason[:match.end()] + short + reason[match.end() + len(whole):]
        return reason
    return shorten
