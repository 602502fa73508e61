"""What every rule looks at, gathered once from a job's files, and the one way rules build a Diagnosis."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lat_core.contract.jobdir import Memory, job_peak

from lat_core.contract.failure_classes import FailureClass
from lat_core.text import shorten, signal_name
from lat_core.triage.explain import signal_of
from lat_core.contract.diagnosis import Diagnosis, Remedy
from lat_core.triage.patterns import LogLine, RootCause, Signature, root_cause, signature_hits, split_lines
from lat_core.triage.sources import JobFiles

SIGKILL = 9
MAX_EVIDENCE = 6
#: A log line longer than this is kept shortened: one minified JSON blob must not fill the journal.
EVIDENCE_CHARS = 4000
TITLE_CHARS = 160


class BaseNumbers(RootCause, total=False):
    """The numbers every diagnosis of the job carries (torchrun's failing rank among them)."""

    returncode: int | None
    signal: str | None
    peak_rss_bytes: int
    peak_gpu_bytes: int
    oom_kills: int


#: A rule's view of a log line that matched: which signature, and the line.
Hit = tuple[Signature, LogLine]


@dataclass(frozen=True)
class Facts:
    """Everything the rules look at, gathered once."""

    files: JobFiles
    lines: list[LogLine]
    hits: dict[str, list[Hit]]
    returncode: int | None
    signal: int | None
    cancelled: bool
    timed_out: bool
    oom_kills: int | None
    base: BaseNumbers

    def first_hit(self, group: str) -> Hit | None:
        """The earliest match of a signature group: the first error usually names the cause."""
        found = self.hits.get(group)
        return found[0] if found else None

    def ending_signal(self) -> int | None:
        """The signal that ended the job, or the failing rank under torchrun (whose own exit is 1)."""
        if self.signal is not None:
            return self.signal
        rank_exit = self.base.get("rank_exitcode")
        return -rank_exit if isinstance(rank_exit, int) and rank_exit < 0 else None

    def killed_by_sigkill(self) -> bool:
        return self.ending_signal() == SIGKILL

    def has_line(self, text: str) -> bool:
        return any(text in line.text for line in self.lines)


def gather(files: JobFiles, returncode: int | None, cancelled: bool, timed_out: bool,
           oom_kills: int | None) -> Facts:
    returncode = _returncode(files, returncode)
    lines = split_lines(files.lines)
    signum = signal_of(returncode)
    return Facts(files, lines, signature_hits(lines) if returncode != 0 else {}, returncode,
                 signum, cancelled, timed_out, oom_kills, _base_numbers(files, lines, returncode, signum, oom_kills))


def _returncode(files: JobFiles, given: int | None) -> int | None:
    """The exit status the caller saw, else the exit record's; None for a record not the runner's."""
    return files.exit_record.returncode if given is None and files.exit_record else given


def _base_numbers(files: JobFiles, lines: list[LogLine], returncode: int | None, signum: int | None,
                  oom_kills: int | None) -> BaseNumbers:
    base: BaseNumbers = {"returncode": returncode, "signal": signal_name(signum) if signum else None}
    cause = root_cause(lines)
    if "rank" in cause:
        base["rank"] = cause["rank"]
    if "rank_exitcode" in cause:
        base["rank_exitcode"] = cause["rank_exitcode"]
    peak = job_peak(files.peak_usage, files.last_event(Memory))  # the number status and results show
    if peak.rss_bytes is not None:
        base["peak_rss_bytes"] = peak.rss_bytes
    if peak.gpu_bytes is not None:
        base["peak_gpu_bytes"] = peak.gpu_bytes
    if oom_kills is not None:
        base["oom_kills"] = oom_kills
    return base


def make_diagnosis(facts: Facts, cls: FailureClass, title: str, text: str, remedies: Iterable[Remedy] = (),
                   numbers: Mapping[str, object] | None = None, evidence: Iterable[str] = (),
                   rank: int | None = None) -> Diagnosis:
    merged: dict[str, object] = dict(facts.base)
    if rank is not None and "rank" not in merged:
        merged["rank"] = rank
    merged.update(numbers or {})
    title = shorten(title, TITLE_CHARS)
    if merged.get("rank") is not None:
        title = f"{title} (rank {merged['rank']})"
    kept = tuple(shorten(line, EVIDENCE_CHARS) for line in evidence if line)[:MAX_EVIDENCE]
    return Diagnosis(cls, title, text, tuple(remedies), {k: v for k, v in merged.items() if v is not None}, kept)
