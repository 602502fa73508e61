"""The job table's columns, shared by the TUI's job table and the plain-text tables (``status``,
the headless summary): a column is added here once and shows up in both, and a job is named the
same way in each (model, config, seed and dataset, never the job key)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from lat_core.contract.rows import GroupUsage, JobSummary, RunRow
from lat_core.front.client import display_name, fmt_bytes
from lat_tui import fmt

SEPARATORS = "-_./"  # where a shared start of config or dataset names may end
MIN_STEM = 8  # below this the model family gives way to the config name
# a fused member's name starts with a tree branch under its group's line: the rows share a process
MEMBER_BRANCH, LAST_MEMBER_BRANCH = "├ ", "└ "
WHOLE_NAME = 10**6  # plain text: names are never cut


@dataclass(frozen=True)
class Shown:
    """What a cell needs beyond its job: the time, each job's model family (job id -> family, where
    job.yaml names one), whether the whole table has one dataset, and the name column's width."""

    now: float
    families: Mapping[int, str] = field(default_factory=dict)
    one_dataset: bool = False
    name_width: int = WHOLE_NAME
    shared: Shared | None = None
    last_members: frozenset[int] = frozenset()  # each fused group's last member (its branch ends)

    @classmethod
    def of(cls, jobs: list[JobSummary], families: Mapping[int, str] | None = None, now: float | None = None,
           name_width: int = WHOLE_NAME) -> Shown:
        families = families or {}
        return cls(now or time.time(), families, len({j.dataset for j in jobs}) <= 1, name_width,
                   Shared.of(jobs, families), last_members(jobs))


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
    branch = member_branch(job, shown)
    return branch + job_name(job, shown.families.get(job.id), shown.name_width - len(branch),
                             with_dataset=not shown.one_dataset, shared=shown.shared)


def member_branch(job: JobSummary, shown: Shown) -> str:
    """A fused member's branch under its group's line; "" for a job with a process of its own."""
    if not job.fused_group:
        return ""
    return LAST_MEMBER_BRANCH if job.id in shown.last_members else MEMBER_BRANCH


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


def job_name(job: JobSummary, family: str | None, width: int = WHOLE_NAME, with_dataset: bool = True,
             shared: Shared | None = None) -> str:
    """``mamba/tiny_lora 1:tiny-sst2``: model family, config, seed and dataset in ``width`` cells.

    Jobs of one run mostly differ in their config, so the config keeps the most room. When the
    name does not fit, what every job of the table shares goes first (``shared``: the model family,
    the start of the config and dataset names), so ``tiny_lora_qkvo 1:glue-tvt_cola`` beside
    ``tiny_lora_q 1:glue-tvt_rte`` reads ``qkvo 1:cola`` and ``q 1:rte``; then the dataset is cut
    (or dropped for ``config@seed`` when every job of the run has the same one), then the middle of
    the config, then the model family.
    """
    full = display_name(family, job.stem, job.seed, job.dataset)
    if len(full) <= width:
        return full
    stem, dataset = job.stem, job.dataset
    if shared is not None:
        family = None if family and family == shared.family else family
        stem, dataset = stem[len(shared.stem_prefix):], dataset[len(shared.dataset_prefix):]
        short = display_name(family, stem, job.seed, dataset)
        if len(short) <= width:
            return short
    return _fit(family, stem, str(job.seed), dataset, width, with_dataset)


def _fit(family: str | None, stem: str, seed: str, dataset: str, width: int, with_dataset: bool) -> str:
    model = f"{family}/" if family else ""
    if with_dataset:
        pair_min = len(seed) + 1 + min(len(dataset), 5)
        tail = " " + _keep_start(f"{seed}:{dataset}", max(pair_min, width - len(model) - 1 - len(stem)))
    else:
        tail = "@" + seed
    stem_room = width - len(model) - len(tail)
    if model and stem_room < min(MIN_STEM, len(stem)):
        return _fit(None, stem, seed, dataset, width, with_dataset)
    return model + _keep_both_ends(stem, max(stem_room, 1)) + tail


@dataclass(frozen=True)
class Shared:
    """What every job of a table has in common, which a name short of room leaves out: the model
    family, and the start of the config and the dataset names up to a separator (``glue-tvt_``)."""

    family: str | None = None
    stem_prefix: str = ""
    dataset_prefix: str = ""

    @classmethod
    def of(cls, jobs: list[JobSummary], families: Mapping[int, str]) -> Shared:
        found = {families.get(job.id) for job in jobs}
        family = found.pop() if len(found) == 1 else None
        return cls(family, shared_start({job.stem for job in jobs}), shared_start({job.dataset for job in jobs}))


def shared_start(names: set[str]) -> str:
    """The start every name has, up to and with its last separator, leaving each name something;
    "" for fewer than two names."""
    if len(names) < 2:
        return ""
    start = os.path.commonprefix(sorted(names))
    cut = max(start.rfind(sep) for sep in SEPARATORS) + 1
    return start[:cut] if cut and all(len(name) > cut for name in names) else ""


def _keep_start(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _keep_both_ends(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    front = (width - 1) // 2
    return text[:front] + "…" + text[len(text) - (width - 1 - front):]
