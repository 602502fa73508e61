"""The small JSON records the runner and the engine keep in a job's ``.lat/`` folder, one frozen
type each, with ``to_json`` and ``from_json``.

Each is read back by another process, perhaps after a crash, a hand edit or an older version wrote
it: ``from_json`` never raises; a record that cannot be used reads as None, or, for an exit record
(whose absence keeps an attempt open forever), as one with an unknown exit code and a ``problem``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lat_core.contract.jobdir import names

if TYPE_CHECKING:  # the runner loads these records and never the event types (test_jobdir_round_trips)
    from lat_core.contract.jobdir.events import Memory


@dataclass(frozen=True)
class OomKills:
    """The kernel's OOM-kill count inside the job's own cgroup (made for it, so counted from 0);
    ``source`` names the file read (``cgroup2:<memory.events>``)."""

    source: str
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "count": self.count}

    @classmethod
    def from_json(cls, raw: object) -> OomKills | None:
        if not isinstance(raw, dict) or _count(raw.get("count")) is None:
            return None
        return cls(str(raw.get("source", "none")), raw["count"])


@dataclass(frozen=True)
class ExitRecord:
    """How an attempt ended, written once the attempt's whole process tree is gone: by the runner
    (the trainer's exit), by a fused group for each member that leaves it, or by the engine for an
    attempt whose runner vanished. ``why``: how it ended when that is not the trainer's own exit (the
    runner could not contain it, the runner vanished, a member left its group, its group ended).
    ``problem`` is the reader's: why a record on disk was unusable (never written)."""

    returncode: int | None  # negative: killed by that signal; None: unknown
    pid: int | None = None
    started: float | None = None
    ended: float | None = None
    max_rss: int | None = None  # the kernel's peak RSS of the trainer (bytes)
    containment: str | None = None  # how the tree was contained (lat_core.containment kinds)
    stopped: int | None = None  # processes the job left running, stopped after the trainer ended
    oom_kills: OomKills | None = None
    why: str | None = None
    fused_group: bool = False
    peak_gpu_bytes: int | None = None  # a fused member's group process's torch peak
    problem: str | None = field(default=None, compare=False)

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    def to_json(self) -> dict[str, Any]:
        return {"returncode": self.returncode, "signal": self.signal, "pid": self.pid, "started": self.started,
                "ended": self.ended, "max_rss": self.max_rss, "containment": self.containment,
                "stopped": self.stopped, "oom_kills": self.oom_kills.to_json() if self.oom_kills else None,
                "why": self.why, "fused_group": self.fused_group, "peak_gpu_bytes": self.peak_gpu_bytes}

    @classmethod
    def from_json(cls, raw: object) -> ExitRecord:
        """A record not of this shape ends the attempt with an unknown exit code and a reason,
        rather than leaving it open forever; a bad optional field reads as unknown."""
        if not isinstance(raw, dict):
            return cls(None, problem="the exit record is unreadable")
        rc = raw.get("returncode")
        if rc is not None and (not isinstance(rc, int) or isinstance(rc, bool)):
            return cls(None, problem=f"the exit record's returncode is {_kind(rc)}, not an integer")
        if rc is not None and not -128 <= rc <= 255:  # exit codes are a byte; deaths by signal are negative
            return cls(None, problem=f"the exit record's returncode {rc} is out of range")
        rss = _count(raw.get("max_rss"))
        return cls(rc, pid=_count(raw.get("pid")), started=_number(raw.get("started")),
                   ended=_number(raw.get("ended")), max_rss=rss or None,
                   containment=_text(raw.get("containment")), stopped=_count(raw.get("stopped")),
                   oom_kills=OomKills.from_json(raw.get("oom_kills")),
                   # older runners and engines kept the same words as "error" and "vanished"
                   why=_text(raw.get("why")) or _text(raw.get("error")) or _text(raw.get("vanished")),
                   fused_group=raw.get("fused_group") is True, peak_gpu_bytes=_count(raw.get("peak_gpu_bytes")))


@dataclass(frozen=True)
class PidRecord:
    """Who runs an attempt, beside its exit record: the runner's pid and start time (a reused pid
    is never taken for it) and how its tree is contained (lat_core.containment's JSON)."""

    pid: int
    pid_start: float | None
    rss_at_fork: int = 0  # a warm-started job's memory inherited from the preloaded process (bytes)
    containment: Mapping[str, Any] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"pid": self.pid, "pid_start": self.pid_start, "containment": self.containment}
        if self.rss_at_fork:
            record["rss_at_fork"] = self.rss_at_fork
        return record

    @classmethod
    def from_json(cls, raw: object) -> PidRecord | None:
        if not isinstance(raw, dict) or not _count(raw.get("pid")):
            return None
        containment = raw.get("containment")
        return cls(raw["pid"], _number(raw.get("pid_start")), _count(raw.get("rss_at_fork")) or 0,
                   containment if isinstance(containment, dict) else None)


@dataclass(frozen=True)
class PeakUsage:
    """A job's peak memory as the engine measured it (its trainer's process tree, see
    lat_core.monitor.usage), kept in the job folder when an attempt ends so that the results tables
    show the number ``status`` shows. None: never measured."""

    rss_bytes: int | None
    gpu_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {"peak_rss_bytes": self.rss_bytes, "peak_gpu_bytes": self.gpu_bytes}

    @classmethod
    def from_json(cls, raw: object) -> PeakUsage | None:
        if not isinstance(raw, dict):
            return None
        return cls(_count(raw.get("peak_rss_bytes")), _count(raw.get("peak_gpu_bytes")))


def job_peak(measured: PeakUsage | None, reported: Memory | None) -> PeakUsage:
    """THE peak memory of a job, which triage, ``status`` (the journal's, of which ``measured``, the
    folder's usage record, is the copy) and the results tables all show: the engine's measure when
    the engine ran the job, the trainer's own report only for a folder it never ran (a trainer run
    by hand). Both are bytes, shown in binary units (MiB) by ``fmt_bytes`` everywhere.

    The engine's is the right one: it is the RSS of the trainer's whole process tree (dataloader
    workers and torchrun ranks included), sampled and raised to the kernel's peak of a cold-started
    trainer (wait4's ru_maxrss), less the pages a warm-started trainer inherited over fork from the
    preloaded process (torch & co., shared, the preloaded process's: lat_core.monitor.usage). The
    trainer reports ru_maxrss of its own process: its children are missing, and for a warm-started
    trainer those inherited pages are counted (issue 28: triage said 503 MiB where status said 172)."""
    if measured is not None:
        return measured
    if reported is None:
        return PeakUsage(None, None)
    return PeakUsage(reported.peak_rss_bytes, reported.peak_gpu_bytes)


@dataclass(frozen=True)
class GroupRef:
    """Beside a fused member's exit record: its group runner's exit record and the group's job ids.
    Reaping, cancel and recovery know from it, from the job's folder alone (an engine restart
    included), that the attempt's process is shared. ``pack``: the group is a warm pack (Slurm's
    ``slurm.pack``): each member trains in a process of its own forked from the group's, on its own
    GPUs, so what it runs out of is its own (no smaller group to retry in)."""

    exit_path: str
    job_ids: tuple[int, ...]
    pack: bool = False

    @property
    def group_id(self) -> str:
        """The journal's name of the group: its first member's job id and attempt number (``12.1``),
        from the group's exit record's name, so an engine that finds the ref alone names it the same."""
        match = names.GROUP_EXIT.match(Path(self.exit_path).name)
        return f"{self.job_ids[0]}.{match.group(1) if match else '?'}"

    def to_json(self) -> dict[str, Any]:
        return {"exit_path": self.exit_path, "job_ids": list(self.job_ids), **({"pack": True} if self.pack else {})}

    @classmethod
    def from_json(cls, raw: object) -> GroupRef | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("exit_path"), str):
            return None
        ids = raw.get("job_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return None
        return cls(raw["exit_path"], tuple(ids), raw.get("pack") is True)


@dataclass(frozen=True)
class GroupLimit:
    """The most members a job's fused groups may have from now on, and why: a group it was in ran
    out of memory (issue 17: retried as smaller groups). ``size`` 1: the job runs alone."""

    size: int
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "why": self.why}

    @classmethod
    def from_json(cls, raw: object) -> GroupLimit | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("why"), str):
            return None
        size = _count(raw.get("size"))
        return cls(size, raw["why"]) if size else None


def _count(value: object) -> int | None:
    """A whole number >= 0 as JSON has it, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
