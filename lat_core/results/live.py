"""An output root's results while its run goes on, for a screen that watches evaluations land.

The screen accounts for every job as ``lat-tui results`` does (``account_for``: the journal's jobs
of the runs asked for, in their states, and with ``strays`` the folders none of them names), so a
config's count reads the same in both (``1 of 3 !``). One thing is added: a running job that already
has a checkpointed validation eval shows its best so far as a provisional result in its config's
row (the scan's own best-so-far result, ``Skipped.partial``), counted apart (``1+1 of 3``: one
succeeded, one running, three planned); a job written but not started is counted as queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lat_core.contract.rows import JobSummary
from lat_core.contract.states import JobState
from lat_core.results.accounts import JobAccount, account_for
from lat_core.results.render import not_in_tables
from lat_core.results.scan import NOT_STARTED_STATE, UNFINISHED_STATE, Report, scan_tree

# an account in one of these states is a job still going: its best so far is provisional
STILL_GOING = (JobState.RUNNING, UNFINISHED_STATE)
WAITING = (JobState.QUEUED, NOT_STARTED_STATE)


@dataclass(frozen=True)
class LiveReport:
    """``report``: the accounted report, its ``results`` holding the succeeded jobs and the
    provisional results of the running ones (``partial`` set: tables count them apart)."""

    report: Report
    running: frozenset[Path]  # job folders whose result is provisional
    queued: int = 0  # jobs planned or folders written, not started

    def left_out(self) -> list[JobAccount]:
        """The jobs that are in no table and are not on their way to one: failed, cancelled, ended
        with no usable evaluation (running and queued jobs are), in the report's order."""
        return [job for job in not_in_tables(self.report) if job.state not in (*STILL_GOING, *WAITING)]


def aggregate_live(root: Path | str, *, jobs: Sequence[JobSummary] = (), runs: Sequence[int] = (),
                   strays: bool = True) -> LiveReport:
    """Aggregate ``root`` with every job accounted for and the running ones folded in (ResultsError
    when ``root`` is not a folder). ``jobs``, ``runs``, ``strays``: as ``account_for`` takes them."""
    scan = scan_tree(root)
    so_far = {s.path.resolve(): s.partial for s in scan.skipped
              if s.ended == UNFINISHED_STATE and s.partial is not None}
    report = account_for(scan, jobs, runs=runs, strays=strays)
    running = tuple(result for job in report.accounts if job.state in STILL_GOING
                    for result in [so_far.get(job.job_dir)] if result is not None)
    queued = sum(job.state in WAITING for job in report.accounts)
    folded = replace(report, results=report.results + running)
    return LiveReport(folded, frozenset(result.job_dir.resolve() for result in running), queued)

