"""The job table's columns, shared by the TUI's job table and the plain-text tables (``status``,
the headless summary): a column is added here once and shows up in both, and a job is named the
same way in each (model, config, seed and dataset, never the job key)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from lat_core.contract.rows import GroupUsage, JobSummary, RunRow
from lat_core.front.client import display_name, fmt_bytes
from lat_tui import fmt
from lat_tui.short_names import NameParts, short_names

# a fused member's name starts with a tree branch under its group's line: the rows share a process
MEMBER_BRANCH, LAST_MEMBER_BRANCH = "├ ", "└ "
WHOLE_NAME = 10**6  # plain text: names are never cut


@dataclass(frozen=True)
class Shown:
    """What a cell needs beyond its job: the time, each job's model family (job id -> family, where
    job.yaml names one), each job's name as the table shows it, and the name column's width."""

    now: float
    families: Mapping[int, str] = field(default_factory=dict)
    names: Mapping[int, str] = field(default_factory=dict)  # job id -> its name in the name column
    name_width: int = WHOLE_NAME
    last_members: frozenset[int] = frozenset()  # each fused group's last member (its branch ends)

    @classmethod
    def of(cls, jobs: list[JobSummary], families: Mapping[int, str] | None = None, now: float | None = None,
           name_width: int = WHOLE_NAME, names: Mapping[int, str] | None = None) -> Shown:
        """``names``: the names of the jobs as the table showed them last, when nothing they are
        made of changed (``names_key``)."""
        families = families or {}
        last = last_members(jobs)
        if names is None:
            branch = {job.id: len(member_branch(job, last)) for job in jobs}
            names = table_names(jobs, families, lambda job_id: name_width - branch[job_id])
        return cls(now or time.time(), families, names, name_width, last)


def names_key(jobs: list[JobSummary], families: Mapping[int, str], name_width: int) -> tuple:
    """What a table's names are made of: the same key, the same names."""
    return name_width, tuple((j.id, families.get(j.id), j.stem, j.seed, j.dataset, j.fused_group) for j in jobs)


def table_names(jobs: list[JobSummary], families: Mapping[int, str],
                width_of: Callable[[int], int]) -> dict[int, str]:
    """Each job's name in its row's width, the rows narrowed alike (lat_tui/short_names.py)."""
    parts = {job.id: NameParts(families.get(job.id), job.stem, str(job.seed), job.dataset) for job in jobs}
    return short_names(parts, width_of)


def last_members(jobs: list[JobSummary]) -> frozenset[int]:
    """The id of each fused group's last member in table order."""
    last = {job.fused_group: job.id for job in jobs if job.fused_group}
    return frozenset(last.values())


@dataclass(frozen=True)
class Column:
    key: str  # the TUI's column key (stable: cells are updated by it)
    header: str
    width: int  # in the TUI; plain text sizes columns to their content
    cell: Callable[[JobSummary, Shown], str]  # "" when unknown


def state_text(state) -> str:
    """A job or run state as its plain value, whether the core hands a str or a str-valued Enum."""
    return str(getattr(state, "value", state))


def run_state_text(run: RunRow, jobs: list[JobSummary]) -> str:
    """The run's state as it is: an ended run with jobs queued again (a requeue the engine has not
    taken yet: it reopens the run when it does) reads ``requeued``, never ``finished``."""
    state = state_text(run.state)
    if state in ("finished", "cancelled") and any(job.state in ("queued", "running") for job in jobs):
        return "requeued"
    return state


def usage_cells(job: JobSummary) -> tuple[str, str]:
    """Host RSS and GPU memory: the latest sample while the job runs, its peak once it ended."""
    rss, gpu = (job.rss, job.gpu_mem) if job.state == "running" else (job.peak_rss, job.peak_gpu)
    # a CPU job's 0 bytes of GPU memory is noise
    return fmt_bytes(rss, compact=True), fmt_bytes(gpu or None, compact=True)


def name_cell(job: JobSummary, shown: Shown) -> str:
    name = shown.names.get(job.id) or job_name(job, shown.families.get(job.id))
    return member_branch(job, shown.last_members) + name


def member_branch(job: JobSummary, last_members: frozenset[int]) -> str:
    """A fused member's branch under its group's line; "" for a job with a process of its own."""
    if not job.fused_group:
        return ""
    return LAST_MEMBER_BRANCH if job.id in last_members else MEMBER_BRANCH


def member_usage_cells(job: JobSummary) -> tuple[str, str]:
    """A fused member's memory is its group's (one process), shown on the group's line: a share
    of it would read as a measurement of the member, so its own cells stay empty."""
    return ("", "") if job.fused_group else usage_cells(job)


JOB_COLUMNS: tuple[Column, ...] = (
    Column("id", "id", 4, lambda j, s: str(j.id)),
    Column("key", "job", 30, name_cell),
    Column("state", "state", 9, lambda j, s: state_text(j.state)),
    Column("device", "dev", 4, lambda j, s: j.device or ""),
    # all its attempts' time together (``try`` counts them), so a retried job's time is what it took
    Column("elapsed", "time", 7, lambda j, s: fmt.clock(j.time_spent(s.now)) if j.state != "queued" else ""),
    Column("step", "step", 5, lambda j, s: fmt.step(j.last_step)),
    Column("loss", "loss", 6, lambda j, s: fmt.loss(j.last_loss)),
    Column("rss", "rss", 4, lambda j, s: member_usage_cells(j)[0]),
    Column("gpu", "gpu", 4, lambda j, s: member_usage_cells(j)[1]),
    Column("attempts", "try", 3, lambda j, s: str(j.attempts)),
)


@dataclass(frozen=True)
class GroupLine:
    """A fused group's line in the job table, above its members' rows: the group's measured memory
    (its process tree's, which no member has alone) and the span of its members."""
    group: GroupUsage
    members: tuple[JobSummary, ...]

    @property
    def running(self) -> bool:
        return any(m.state == "running" for m in self.members)

    def cells(self, shown: Shown) -> dict[str, str]:
        """Cells by column key; the others stay empty."""
        rss, gpu = (self.group.rss, self.group.gpu_mem) if self.running else (self.group.peak_rss, self.group.peak_gpu)
        started = [m.started for m in self.members if m.started is not None]
        ended = [m.ended or shown.now for m in self.members if m.started is not None]
        return {"key": self.title(shown.name_width), "device": self.group.device or "",
                "state": "running" if self.running else "ended",
                "elapsed": fmt.clock(max(ended) - min(started)) if started else "",
                "rss": fmt_bytes(rss, compact=True), "gpu": fmt_bytes(gpu or None, compact=True)}


    def title(self, width: int) -> str:
        """The longest of the group's names that fits ``width``: it says the jobs share a process."""
        n, group = self.group.members, self.group.id
        names = (f"group {group}: {n} jobs in one process", f"group {group}: {n} jobs", f"{n} jobs, 1 process",
                 f"{n} in 1 proc", f"{n} jobs")
        return next((name for name in names if len(name) <= width), names[-1])


def table_rows(jobs: list[JobSummary], groups: Mapping[str, GroupUsage] | None = None
               ) -> list[JobSummary | GroupLine]:
    """The table's rows in order: each fused group's line where its first member would be, its
    members right under it; a member whose group is unknown stays a row of its own."""
    groups = groups or {}
    members: dict[str, list[JobSummary]] = {}
    for job in jobs:
        if job.fused_group in groups:
            members.setdefault(job.fused_group, []).append(job)
    rows: list[JobSummary | GroupLine] = []
    for job in jobs:
        if job.fused_group not in groups:
            rows.append(job)
        elif members[job.fused_group][0] is job:
            rows += [GroupLine(groups[job.fused_group], tuple(members[job.fused_group])), *members[job.fused_group]]
    return rows


def row_cells(row: JobSummary | GroupLine, shown: Shown) -> list[str]:
    if isinstance(row, GroupLine):
        cells = row.cells(shown)
        return [cells.get(c.key, "") for c in JOB_COLUMNS]
    return [c.cell(row, shown) for c in JOB_COLUMNS]


def plain_table(jobs: list[JobSummary], families: Mapping[int, str] | None = None,
                now: float | None = None, groups: Mapping[str, GroupUsage] | None = None) -> str:
    """The job table as aligned text; an unknown value shows as "-" so no column reads empty, and
    a fused group's line holds its memory, its members' rows (indented) none.

    Built a column at a time with one format string per line: ``status`` of a 10,000-job run
    prints within its half-second budget."""
    shown = Shown.of(jobs, families, now)
    rows = table_rows(jobs, groups)
    header = [c.header for c in JOB_COLUMNS]
    columns = list(zip(header, *([cell or "-" for cell in row_cells(r, shown)] for r in rows)))
    widths = [max(map(len, column)) for column in columns]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(line.format(*row).rstrip() for row in zip(*columns))


def job_name(job: JobSummary, family: str | None) -> str:
    """``mamba/tiny_lora 1:tiny-sst2``: a job's one name, everywhere but in a narrow table."""
    return display_name(family, job.stem, job.seed, job.dataset)
