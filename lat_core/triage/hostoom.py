"""The kernel's OOM-kill counter, read where it is most specific to the job.

A SIGKILL alone does not prove a host OOM (a user, a scheduler or a watchdog may send one); the
kernel's ``oom_kill`` counter rising across the job's lifetime does. The job's own cgroup is the
best source: where the runner gave the job a cgroup v2 of its own with the memory controller
(:mod:`lat_core.containment`), the runner reads that group's ``memory.events`` (which started at 0)
as the trainer ends and puts it in the exit record. Else the runner's cgroup, read at launch and at the
end (v2 ``memory.events``, v1 ``memory.oom_control``), and last the host-wide ``/proc/vmstat``
counter, which may also count kills of unrelated processes.
``root`` is injectable so tests lay out a fake ``/proc`` and ``/sys`` in a temporary folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OomCounter:
    """``source`` names the file read (``cgroup2:<file>``, ``cgroup1:<file>``, ``vmstat``, ``none``)."""

    source: str
    count: int | None

    @property
    def known(self) -> bool:
        return self.count is not None

    @classmethod
    def from_json(cls, data: object) -> OomCounter | None:
        """The job's own counter as the runner recorded it (``lat_core.containment.job_oom_kills``)."""
        if not isinstance(data, dict) or not isinstance(data.get("count"), int):
            return None
        return cls(str(data.get("source", "none")), data["count"])


def oom_kill_readings(exit_record: Mapping[str, object] | None, source: str | None, before: int | None,
                      root: Path = Path("/")) -> tuple[int | None, int | None]:
    """(before, after) for triage: the job's own cgroup counter from the exit record where the
    runner recorded one, else the counter read at launch (``source``, ``before``) read again now."""
    own = OomCounter.from_json((exit_record or {}).get("oom_kills"))
    if own is not None:
        return 0, own.count
    return before, (reread_oom_kill_count(source, root).count if source else None)


def read_oom_kill_count(pid: int | None, root: Path = Path("/")) -> OomCounter:
    """The OOM-kill count for ``pid``'s memory cgroup (the caller's own when None: jobs inherit
    the engine's cgroup), falling back to the host-wide count."""
    cgroup_file = root / "proc" / (str(pid) if pid else "self") / "cgroup"
    for source in _cgroup_sources(cgroup_file, root):
        counter = reread_oom_kill_count(source, root)
        if counter.known:
            return counter
    return reread_oom_kill_count("vmstat", root)


def reread_oom_kill_count(source: str, root: Path = Path("/")) -> OomCounter:
    """Read the same source again (the job's pid is gone by the time its death is triaged)."""
    kind, _, path = source.partition(":")
    if kind == "vmstat":
        return OomCounter("vmstat", _key_value(root / "proc" / "vmstat", "oom_kill"))
    if kind in ("cgroup2", "cgroup1"):
        return OomCounter(source, _key_value(root / path.lstrip("/"), "oom_kill"))
    return OomCounter("none", None)


def _cgroup_sources(cgroup_file: Path, root: Path) -> list[str]:
    """Candidate counter files, most specific first. v1's memory controller wins over v2 on hybrid
    hosts, where the v2 tree carries no memory controller."""
    try:
        text = cgroup_file.read_text()
    except OSError:
        return []
    key = (text, root)
    if key not in _SOURCES:
        lines = text.splitlines()
        v1 = [_v1_file(path, root) for line in lines for path in _v1_memory_path(line)]
        v2 = [_v2_file(line.split(":", 2)[2], root) for line in lines if line.startswith("0::")]
        found = [s for s in v1 + v2 if s]
        if not found:
            return []  # not remembered: a memory controller enabled later is found then
        if len(_SOURCES) >= _SOURCES_KEPT:
            _SOURCES.clear()
        _SOURCES[key] = found
    return list(_SOURCES[key])


# /proc/<pid>/cgroup's text -> its counter files. The engine reads the counter at every launch and
# its jobs share its cgroup: looking for the files once per cgroup, not per job, saves the stats.
_SOURCES: dict[tuple[str, Path], list[str]] = {}
_SOURCES_KEPT = 256


def _v1_memory_path(line: str) -> list[str]:
    parts = line.split(":", 2)
    return [parts[2]] if len(parts) == 3 and "memory" in parts[1].split(",") else []


def _v1_file(cgroup_path: str, root: Path) -> str | None:
    return _first_existing(root, "sys/fs/cgroup/memory", cgroup_path, "memory.oom_control", "cgroup1")


def _v2_file(cgroup_path: str, root: Path) -> str | None:
    return (_first_existing(root, "sys/fs/cgroup", cgroup_path, "memory.events", "cgroup2")
            or _first_existing(root, "sys/fs/cgroup/unified", cgroup_path, "memory.events", "cgroup2"))


def _first_existing(root: Path, mount: str, cgroup_path: str, name: str, kind: str) -> str | None:
    """The cgroup's file under the mount, or the mount's own: inside a cgroup namespace the
    container's cgroup is the mount root while /proc still shows the host-side path."""
    for folder in (f"{mount}/{cgroup_path.strip('/')}".rstrip("/"), mount):
        if (root / folder / name).is_file():
            return f"{kind}:/{folder}/{name}"
    return None


def _key_value(path: Path, key: str) -> int | None:
    """``key N`` from a flat keyed file such as memory.events or /proc/vmstat."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value.strip())
    return None


def oom_kills_between(before: int | None, after: int | None) -> int | None:
    """How many OOM kills happened during the job; None when either reading is missing."""
    if before is None or after is None:
        return None
    return max(0, after - before)
