"""An output root's results while its run goes on, for a screen that watches evaluations land.

``aggregate`` leaves an unfinished job out of the tables (its best checkpoint can still change). A
running job that already has a checkpointed validation eval is therefore added as a provisional
result, named in ``running`` (tables count it apart: ``2+1`` is two finished seeds and one
running), and a job folder written but not started is counted as queued rather than skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from lat_core.contract.jobdir.names import EVENTS as EVENTS_FILE
from lat_core.contract.jobdir.names import JOB_YAML as CONFIG_FILE
from lat_core.results.scan import JobResult, Report, Skipped, build_result, parse_events, scan_tree

UNFINISHED = "unfinished"  # the scan's reason for a job folder whose events have no end yet
NOT_STARTED = "not started"  # the scan's reason for a job folder without events: a queued job


@dataclass(frozen=True)
class LiveReport:
    """``report`` holds the finished and the provisional results; its ``skipped`` leaves out the
    running and the queued jobs."""

    report: Report
    running: frozenset[Path]  # job folders whose result is provisional
    queued: int = 0  # job folders written but not started


def provisional_result(skipped: Skipped) -> JobResult | None:
    """A still-running job's result so far (the scan's own event parsing and best choice), or None."""
    if not skipped.reason.startswith(UNFINISHED):
        return None
    try:
        text = (skipped.path / EVENTS_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    parsed = parse_events(text)
    if parsed.finished is not None or parsed.failed is not None:
        return None  # it ended between the scan and this read: the next aggregation has it
    outcome = build_result(skipped.path, (skipped.path / CONFIG_FILE).is_file(), parsed)
    return outcome if isinstance(outcome, JobResult) else None


def aggregate_live(root: Path | str) -> LiveReport:
    """Aggregate ``root`` with its running jobs folded in (ResultsError when it is not a folder)."""
    report = scan_tree(root)
    provisional = {skipped.path: provisional_result(skipped) for skipped in report.skipped}
    running = tuple(result for result in provisional.values() if result is not None)
    left = [skipped for skipped in report.skipped if provisional[skipped.path] is None]
    queued = sum(skipped.reason.startswith(NOT_STARTED) for skipped in left)
    still_skipped = tuple(skipped for skipped in left if not skipped.reason.startswith(NOT_STARTED))
    merged = replace(report, results=report.results + running, skipped=still_skipped)
    return LiveReport(merged, frozenset(result.job_dir for result in running), queued)
