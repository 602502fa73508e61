"""Every job of the runs asked for, with its state and, where it is not in a table, why.

Why the journal and not the folders alone: a results table that leaves a failed seed out without a
word reads as a config that was planned with fewer seeds. The journal knows what was planned and how
each job ended (its state and triage's diagnosis); the folders hold the metrics. A job the journal
does not know (a folder from elsewhere, a tree copied off the server) is accounted by what its
folder says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lat_core.contract.jobdir import EarlyStop, SweepPoint
from lat_core.contract.rows import JobRow, JobSummary
from lat_core.contract.states import JobState
from lat_core.titles import display_name
from lat_core.results.scan import ENDED_OK, UNKNOWN, Identity, JobResult, Report, Skipped, scan_job

NO_FOLDER = "no job folder"


@dataclass(frozen=True)
class JobAccount:
    """One job: which it is, its state (the journal's, else its folder's: ``succeeded``, ``failed``,
    ``cancelled``, ``pruned``, ``running``, ``queued``, ``unfinished``, ``not started``), whether its metrics
    are in a table, and why not."""

    job_dir: Path
    config: str
    dataset: str
    seed: int | None
    state: str
    in_table: bool
    reason: str = ""  # why it is not in a table ("" when it is)
    partial: bool = False  # its best so far is in a partial row (--include-partial)
    best_step: int | None = None
    value: float | None = None  # its main metric at best_step (a partial job's: best so far)
    job_id: int | None = None
    run_id: int | None = None
    family: str | None = None  # the model family, where the journal knows the job
    stopped_early: EarlyStop | None = None  # its training stopped before max_steps, as its finished event says
    point: SweepPoint | None = None  # the sweep point it trains, as its folder's overrides.json says
    point_problem: str | None = None  # why its overrides.json could not say its point (Report.warnings)

    @property
    def name(self) -> str:
        """The job's one name, the tables' (``gla/lora_r8 87:glue-tvt_sst2``; lat_core.titles)."""
        return display_name(self.family, self.config, "?" if self.seed is None else self.seed, self.dataset)

    @property
    def state_text(self) -> str:
        """``succeeded``; ``succeeded, stopped early at step 6 of 40 (no better mcc for 2 evals)``."""
        return f"{self.state}, {self.stopped_early.line()}" if self.stopped_early else self.state


def _latest_per_folder(jobs: Sequence[JobSummary]) -> dict[Path, JobSummary]:
    """One journal job per folder: a later run's job of the same folder replaces an earlier one."""
    chosen: dict[Path, JobSummary] = {}
    for job in sorted(jobs, key=lambda j: (j.run_id, j.id)):
        chosen[Path(job.job_dir).resolve()] = job
    return chosen


def _journal_reason(job: JobSummary) -> str:
    """Why the journal says the job failed or was cancelled: triage's diagnosis, else its error."""
    diagnosis = job.diagnosis if isinstance(job, JobRow) else None
    if diagnosis is not None and diagnosis.failed:
        return diagnosis.one_line()
    return job.error or ""


def _state_reason(state: str, outcome: JobResult | Skipped | None, job: JobSummary | None) -> str:
    """Why a job is not in a table: the journal's reason for a failure, else the folder's."""
    said = _journal_reason(job) if job is not None and state in (JobState.FAILED, JobState.CANCELLED,
                                                                  JobState.PRUNED) else ""
    if outcome is None:
        return said or NO_FOLDER
    folder = outcome.reason.removeprefix(f"{state}: ") if isinstance(outcome, Skipped) else ""
    if state == JobState.SUCCEEDED:
        return f"no usable evaluation: {folder}" if folder else ""
    return said or folder or state


def _identity(outcome: JobResult | Skipped | None, job: JobSummary | None, path: Path) -> Identity:
    """Which job: as its folder says (tables group results by it), else as the journal planned it
    (a folder may not say: a trainer that died before its first event, with no job.yaml)."""
    if isinstance(outcome, JobResult):
        found: Identity | None = Identity(outcome.config, outcome.data, outcome.seed, outcome.point,
                                          outcome.point_problem)
    else:
        found = outcome.identity if isinstance(outcome, Skipped) else None
    if job is None:
        return found or Identity(path.name, UNKNOWN, None)
    if found is None:
        return Identity(job.stem, job.dataset, job.seed)
    return Identity(found.config, job.dataset if found.data == UNKNOWN else found.data,
                    job.seed if found.seed is None else found.seed, found.point, found.point_problem)


def _folder_state(outcome: JobResult | Skipped) -> str:
    return ENDED_OK if isinstance(outcome, JobResult) else outcome.ended


def _best_of(outcome: JobResult | Skipped | None) -> JobResult | None:
    """The folder's result: a finished job's, or the best so far of one that did not finish well."""
    if isinstance(outcome, JobResult):
        return outcome
    return outcome.partial if isinstance(outcome, Skipped) else None


def account(path: Path, outcome: JobResult | Skipped | None, job: JobSummary | None) -> JobAccount:
    """One job's account from its folder's outcome and its journal row (either may be missing)."""
    state = str(job.state.value) if job is not None else _folder_state(outcome) if outcome else NO_FOLDER
    in_table = isinstance(outcome, JobResult) and state == JobState.SUCCEEDED
    who = _identity(outcome, job, path)
    best = _best_of(outcome)
    return JobAccount(job_dir=path, config=who.config, dataset=who.dataset, seed=who.seed, state=state,
                      in_table=in_table, reason="" if in_table else _state_reason(state, outcome, job),
                      best_step=best.best_step if best else None, value=best.best_value if best else None,
                      job_id=job.id if job else None, run_id=job.run_id if job else None,
                      family=job.family if job else None, point=who.point, point_problem=who.point_problem,
                      stopped_early=outcome.stopped_early if outcome and state == JobState.SUCCEEDED else None)


def _partial_candidate(account: JobAccount, outcome: JobResult | Skipped | None) -> JobResult | None:
    """The best-so-far result of a job that ended without succeeding (failed, cancelled, killed)."""
    if account.in_table or account.state in (JobState.RUNNING, JobState.QUEUED):
        return None
    best = _best_of(outcome)
    return replace(best, partial=True) if best is not None else None


def account_for(report: Report, jobs: Sequence[JobSummary] = (), *, runs: Sequence[int] = (),
                strays: bool = True, include_partial: bool = False) -> Report:
    """``report`` (a scan of the output root) with every job accounted for: the journal's ``jobs``
    (of ``runs``) in their states, and, with ``strays``, the job folders no such job names.

    Only succeeded jobs' results stay in the tables; ``include_partial`` puts the best so far of
    the others in ``partial``. Folders that are no job's stay in ``skipped``."""
    outcomes: list[JobResult | Skipped] = [*report.results, *report.skipped]
    by_folder = {_path_of(item): item for item in outcomes}
    planned = _latest_per_folder(jobs)
    entries = [(account(path, outcome, job), outcome) for path, job in planned.items()
               for outcome in [by_folder.get(path) or (scan_job(path) if path.is_dir() else None)]]
    if strays:
        entries += [(account(path, outcome, None), outcome) for path, outcome in by_folder.items()
                    if path not in planned and _is_a_job(outcome)]
    results = tuple(o for a, o in entries if a.in_table and isinstance(o, JobResult))
    best_so_far = [_partial_candidate(a, o) if include_partial else None for a, o in entries]
    accounts = tuple(_with_partial(a, p is not None) for (a, _), p in zip(entries, best_so_far))
    others = tuple(s for s in report.skipped if not _is_a_job(s) and _path_of(s) not in planned)
    return replace(report, results=results, skipped=others, accounts=accounts,
                   partial=tuple(p for p in best_so_far if p is not None), runs=tuple(runs))


def _with_partial(job: JobAccount, partial: bool) -> JobAccount:
    """A job out of the tables shows its best so far only when partial results were asked for."""
    if job.in_table or partial:
        return replace(job, partial=partial)
    return replace(job, best_step=None, value=None)


def _path_of(item: JobResult | Skipped) -> Path:
    return (item.job_dir if isinstance(item, JobResult) else item.path).resolve()


def _is_a_job(outcome: JobResult | Skipped) -> bool:
    """A folder that holds a job (not a foreign or unreadable one)."""
    return isinstance(outcome, JobResult) or outcome.identity is not None
