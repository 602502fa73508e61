"""The one door from the front ends into the core: read state, send commands, start runs.

Front ends (``lat_tui``) never open the journal themselves; they build a :class:`Client` from a
state directory and get typed, immutable rows back. Journal trouble (a locked or corrupt file, a
missing run) comes out as :class:`~lat_core.errors.JournalError`, so a caller catches one error type.

A journal connection belongs to the thread that opened it (SQLite's rule), and the TUI reads from
worker threads, so the client keeps one connection per thread.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lat_core import __version__ as LAT_VERSION
from lat_core.contract.commands import Command, CommandRow
from lat_core.errors import JournalError, NoJobError, NoSuchRunError
from lat_core.contract.jobdir import AnyEvent, JobDir, last_log_line
from lat_core.contract.jobdir.names import JOB_YAML
from lat_core.contract.journal_faults import journal_faults
from lat_core.contract.rows import AttemptRow, GroupUsage, JobRow, JobSummary, RunRow, Transition
from lat_core.contract.state_dir import JOURNAL_NAME, EngineLock, default_state_dir, open_store
from lat_core.front.service import AddChecks, PreparedRun, create_run, ensure_engine, jobs_to_add, prepare_run
from lat_core.contract.states import JOB_UNFINISHED
from lat_core.contract.journal import JOB_FINAL, PAUSED_BY_USER, RUN_ACTIVE, Store

if TYPE_CHECKING:  # a plan means pydantic: reading state never loads it
    from lat_core.front.plan import Plan

if TYPE_CHECKING:  # the libraries' names front ends use, loaded on first use: see _ELSEWHERE below
    from lat_core.config.datasets import KNOWN_DATASETS
    from lat_core.config.email_yaml import OLD_EVENTS
    from lat_core.config.env import EMAIL_YAML_VAR, MASK, EnvValueError, pair_from_env
    from lat_core.config.suites import SuiteRegistry
    from lat_core.contract.plan_defaults import PLAN_DEFAULTS
    from lat_core.front.plan import AUTO_REMEDIES, plan_from_mapping
    from lat_core.front.rerun import prepare_rerun
    from lat_core.front.warmup import plan_kernel_shapes, warm_up_kernels
    from lat_core.monitor.gpu import GpuInfo, GpuProbe, GpuSnapshot
    from lat_core.monitor.host import HostSnapshot, host_snapshot
    from lat_core.results import (JobResult, Report, SweepTable, Table, aggregate, build_sweeps, build_tables,
                                  check_formats, write_report)
    from lat_core.results.live import LiveReport, aggregate_live
    from lat_core.results.plots import Band, seed_band
    from lat_core.results.render import count_text, not_in_tables, report_json, summary_line, table_markdown
    from lat_core.results.scan import FOREIGN_REASON
    from lat_core.results.sweep_render import best_line, left_out_text, point_count_text, point_mean_text, sweep_markdown
    from lat_core.results.tables import Row
    from lat_core.text import fmt_bytes, value_text
    from lat_core.titles import display_name
    from lat_core.triage import Diagnosis, TriageError, classify

__all__ = [
    # the journal: runs, jobs, commands
    "Client", "CommandRow", "JOB_FINAL", "JOB_UNFINISHED", "PAUSED_BY_USER", "RUN_ACTIVE", "NoJobError", "NoRunError",
    "NoSuchRunError", "NoStateError",
    "ensure_engine",
    "journal_faults_in", "plan_env_of", "resolve_state_dir", "LAT_VERSION",
    # job folders
    "job_config_path", "job_log_path", "last_log_line", "recent_events", "requeue_start", "resumable_checkpoints",
    # configs, plans, reruns, notices
    "AUTO_REMEDIES", "EMAIL_YAML_VAR", "EnvValueError", "KNOWN_DATASETS", "MASK", "OLD_EVENTS", "PLAN_DEFAULTS", "Plan",
    "SuiteRegistry", "mail_notice",
    "pair_from_env", "plan_from_mapping", "prepare_rerun", "read_plan_file", "suite_registry",
    # GPU kernels compiled ahead of time
    "plan_kernel_shapes", "warm_up_kernels",
    # the machine
    "GpuInfo", "GpuProbe", "GpuSnapshot", "HostSnapshot", "host_snapshot",
    # results and triage
    "Band", "Diagnosis", "FOREIGN_REASON", "JobResult", "LiveReport", "Report", "Row", "Table", "TriageError", "aggregate",
    "aggregate_live", "build_tables", "check_formats", "classify", "count_text", "not_in_tables", "report_json",
    "seed_band", "summary_line", "table_markdown", "write_report",
    # a sweep's results by its values
    "SweepTable", "best_line", "build_sweeps", "left_out_text", "point_count_text", "point_mean_text", "sweep_markdown",
    # words people read
    "display_name", "fmt_bytes", "value_text",
]


# ---------------------------------------------------------------------------- job folders
def resumable_checkpoints(job_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, folder) of the job's complete checkpoints, oldest first: the ones ``--resume`` takes
    (THE checkpoint rule, lat_core.contract.jobdir, which the trainer uses too)."""
    return JobDir(job_dir).resumable_checkpoints()


def requeue_start(job_dir: str | Path, asked: str | None) -> tuple[str, str]:
    """How a failed or cancelled job requeued with the others starts: ``(start, what it got)``."""
    return JobDir(job_dir).requeue_start(asked)


def job_log_path(job_dir: str | Path) -> Path:
    """The job's train.log (the trainer's output and the runner's [lat] lines)."""
    return JobDir(job_dir).train_log


def job_config_path(job_dir: str | Path) -> Path:
    """The job's resolved config (job.yaml), as the front end planned it."""
    return JobDir(job_dir).job_yaml


def recent_events(job_dir: str | Path) -> tuple[AnyEvent, ...]:
    """The job's valid events among the end of its events.jsonl: how it ends."""
    return JobDir(job_dir).recent_events()


class NoRunError(JournalError):
    title = "No run"


class NoStateError(JournalError):
    """A state directory without a journal: a mistyped --state-dir or $LAT_STATE_DIR, or no run ever."""

    title = "No state"


def resolve_state_dir(state_dir: str | Path | None) -> Path:
    """``--state-dir`` when given, else ``$LAT_STATE_DIR`` or the XDG default."""
    return Path(state_dir).expanduser() if state_dir else default_state_dir()


def journal_faults_in(state_dir: Path) -> AbstractContextManager[None]:
    """SQLite and disk errors on ``state_dir``'s journal, raised as one JournalError that names the
    journal and says what to do (what every ``lat-tui`` command prints before exit 2)."""
    return journal_faults(state_dir / JOURNAL_NAME)


def _check_state_exists(state_dir: Path) -> None:
    where = "no such directory" if not state_dir.is_dir() else f"no journal ({JOURNAL_NAME}) in it"
    if not (state_dir / JOURNAL_NAME).is_file():
        raise NoStateError(f"no LAT state here: {where}; check --state-dir or $LAT_STATE_DIR (a first run, "
                           "`lat-tui --plan PLAN`, creates it)", where=str(state_dir))


class Client:
    """Reads and commands for one state directory; cheap to build, safe to share between threads."""

    def __init__(self, state_dir: str | Path | None = None, *, existing: bool = False):
        """``existing``: only a state directory that holds a journal (NoStateError otherwise, with
        nothing created), for commands that read or steer runs; a front end that starts runs
        creates the directory on first use."""
        self.state_dir = resolve_state_dir(state_dir)
        if existing:
            _check_state_exists(self.state_dir)
        self._local = threading.local()
        self._families: dict[int, str] = {}  # job id -> model family ("" once known to name none)

    # ------------------------------------------------------------------ plumbing
    @property
    def journal_path(self) -> Path:
        return self._store().path

    def _store(self) -> Store:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = open_store(self.state_dir)
        return store

    @contextmanager
    def _journal(self) -> Iterator[Store]:
        """The thread's journal; a fault in it (locked, full, read-only, damaged) is one JournalError
        that names the journal and says what to do."""
        with journal_faults_in(self.state_dir):
            yield self._store()

    def close(self) -> None:
        """Close this thread's connection (other threads' close with their thread)."""
        store = getattr(self._local, "store", None)
        if store is not None:
            store.close()
            self._local.store = None

    # ------------------------------------------------------------------ runs
    def runs(self) -> list[RunRow]:
        with self._journal() as store:
            return store.runs()

    def run(self, run_id: int) -> RunRow:
        """Run ``run_id``; a run id the user typed that is not there is a NoSuchRunError that says
        which runs the state directory holds (a usage error, not a damaged journal)."""
        with self._journal() as store:
            try:
                return store.run(run_id)
            except NoSuchRunError:
                raise NoSuchRunError(_no_run_text(store, run_id), where=str(self.state_dir)) from None

    def latest_run(self) -> RunRow | None:
        with self._journal() as store:
            return store.latest_run()

    def current_run(self) -> RunRow | None:
        """The newest active run, else the newest run: what a front end opens by default."""
        with self._journal() as store:
            active = store.active_runs()
            return active[-1] if active else store.latest_run()

    def resolve_run(self, run_id: int | None = None) -> RunRow:
        """Run ``run_id``, or the latest; NoRunError naming the state directory when there is none."""
        if run_id is not None:
            return self.run(run_id)
        run = self.latest_run()
        if run is None:
            raise NoRunError("no run yet (start one with `lat-tui` or `lat-tui --plan PLAN`)",
                             where=str(self.state_dir))
        return run

    def runs_of_root(self, output_root: str | Path) -> list[RunRow]:
        """The runs that write their jobs under ``output_root``: the jobs a results view of that
        folder accounts for."""
        root = Path(output_root).expanduser().resolve()
        return [run for run in self.runs() if Path(run.output_root).expanduser().resolve() == root]

    def live_results(self, output_root: str | Path) -> LiveReport:
        """``output_root`` aggregated as the results screen shows it: every job of its runs
        accounted for as ``lat-tui results`` does, running jobs' best so far folded in."""
        from lat_core.results.live import aggregate_live

        runs = self.runs_of_root(output_root)
        jobs = [job for run in runs for job in self.jobs(run.id)]
        return aggregate_live(output_root, jobs=jobs, runs=[run.id for run in runs])

    def engine_alive(self) -> bool:
        return EngineLock(self.state_dir).is_held()

    def engine_error(self, run_id: int) -> str | None:
        """Why the engine cannot serve the run right now (its last tick failed), else None."""
        with self._journal() as store:
            return store.engine_error(run_id)

    def pause_reason(self, run_id: int) -> str:
        """Why the run's admission is paused: the user (PAUSED_BY_USER), a full disk, the circuit breaker."""
        with self._journal() as store:
            return store.pause_reason(run_id)

    def revive_engine(self, run: RunRow) -> str:
        """The engine's state for ``run``: a dead engine of an active run is restarted (it adopts
        the running jobs); a JournalError says why it cannot be."""
        if self.engine_alive():
            return "running"
        if run.state not in RUN_ACTIVE:
            return "not running"
        self.ensure_engine(plan_env_of(run))
        return "restarted (it adopts the running jobs)"

    # ------------------------------------------------------------------ jobs
    def jobs(self, run_id: int) -> list[JobRow]:
        with self._journal() as store:
            return store.jobs(run_id)

    def job_table(self, run_id: int) -> list[JobSummary]:
        """The run's jobs as tables show them (no argv, env or diagnosis): one cheap query, for
        ``status`` and every poll of a run of thousands of jobs."""
        with self._journal() as store:
            return store.job_summaries(run_id)

    def unfinished_jobs(self, run_id: int) -> list[JobSummary]:
        """The run's failed and cancelled jobs, in table order: what ``requeue --failed`` sends back."""
        return [job for job in self.job_table(run_id) if job.state in JOB_UNFINISHED]

    def job_counts(self, run_id: int) -> dict[str, int]:
        """How many of the run's jobs are in each state (states with none left out)."""
        with self._journal() as store:
            return store.job_counts(run_id)

    def fused_groups(self, run_id: int) -> dict[str, GroupUsage]:
        """The run's fused groups by id, with their measured memory (a member's is its group's)."""
        with self._journal() as store:
            return store.fused_groups(run_id)

    def job(self, job_id: int, run_id: int | None = None) -> JobRow:
        """Job ``job_id`` (one of run ``run_id`` when given). A job id the user typed that is not
        there is a NoJobError that says which run's jobs it was looked for among (a usage error,
        not a damaged journal)."""
        with self._journal() as store:
            try:
                job = store.job(job_id)
            except NoJobError:
                raise NoJobError(_no_job_text(store, job_id, run_id)) from None
        if run_id is not None and job.run_id != run_id:
            raise NoJobError(f"no job {job_id} in run {run_id}: it is a job of run {job.run_id} "
                             f"(--run {job.run_id})")
        return job

    def model_family(self, job: JobSummary) -> str | None:
        """The model family of the job's resolved config: the journal's, or for a journal from
        before it was kept, job.yaml's ``model.family`` read once per job; None while the file is
        not written yet or names none."""
        if job.family:
            return job.family
        family = self._families.get(job.id)
        if family is None:
            family = _read_model_family(Path(job.job_dir) / JOB_YAML)
            if family is not None:
                self._families[job.id] = family
        return family or None

    def model_families(self, jobs: list[JobSummary]) -> dict[int, str]:
        """job id -> model family, for the jobs whose job.yaml names one (how front ends name jobs)."""
        return {job.id: family for job in jobs if (family := self.model_family(job))}

    def attempts(self, job_id: int) -> list[AttemptRow]:
        with self._journal() as store:
            return store.attempts(job_id)

    def history(self, run_id: int, *, job_id: int | None = None, after_id: int = 0) -> list[Transition]:
        """State changes and notes, oldest first; only ``job_id``'s when given."""
        with self._journal() as store:
            return store.transitions(run_id, after_id=after_id, job_id=job_id)

    # ------------------------------------------------------------------ commands
    def command(self, command_id: int) -> CommandRow:
        with self._journal() as store:
            return store.command(command_id)

    def send(self, run: RunRow, command: Command, *, start_engine: bool = True) -> int:
        """Append a command for the engine; start one when none serves the state directory (an
        ended run has no engine, and its commands still need one). Returns the command id."""
        with self._journal() as store:
            command_id = store.add_command(run.id, command)
        if start_engine:
            self.ensure_engine(plan_env_of(run))
        return command_id

    def wait_answer(self, command_id: int, timeout: float = 15.0, poll: float = 0.2) -> CommandRow | None:
        """The command once the engine has answered it, or None after ``timeout`` seconds."""
        deadline = time.time() + timeout
        while True:
            row = self.command(command_id)
            if row.answered:
                return row
            if time.time() >= deadline:
                return None
            time.sleep(poll)

    def ensure_engine(self, extra_env: dict[str, str] | None = None) -> bool:
        """Start a detached engine unless one runs; True when one was started."""
        return ensure_engine(self.state_dir, extra_env)

    # ------------------------------------------------------------------ new runs and jobs
    def new_run(self, plan: Plan, *, registry: SuiteRegistry | None = None,
                probe: GpuProbe | None = None) -> tuple[RunRow, PreparedRun]:
        """Check the plan against the machine, then write the run's folders and journal rows (the
        engine is not started here). Raises LatError, with nothing written, when it cannot start."""
        prepared = prepare_run(plan, registry=registry, probe=probe)
        return self.create_prepared(prepared), prepared

    def create_prepared(self, prepared: PreparedRun) -> RunRow:
        """Write a run whose jobs are already expanded (a rerun of one job folder)."""
        with self._journal() as store:
            return store.run(create_run(store, prepared))

    def jobs_to_add(self, run: RunRow, suites: list[str], rounds: object, pairs: object,
                    registry: SuiteRegistry, after: object = None, allow_cpu: bool = False,
                    ) -> list[dict[str, object]]:
        """Records for more jobs in ``run``; refused (PlanError) where a live run owns their folders,
        and (PreflightError) where they cannot work on its devices unless ``allow_cpu`` lets a big
        model train on its CPU. ``after``: ids of jobs they wait for (as a plan's ``after:`` takes them)."""
        return jobs_to_add(run, suites, rounds, pairs, registry, self.state_dir, after, AddChecks(allow_cpu))


def mail_notice(yaml_path: str | Path, kind: str, subject: str, body: str) -> tuple[bool, list[str]]:
    """One notice mailed with the settings of a SwanLab e-mail YAML (``lat-tui notify``, the old
    ``email_notify`` script): (delivered, recipients). A failure is logged without the password."""
    from lat_core.config.email_yaml import read_email_yaml
    from lat_core.notify import smtp_from_mapping

    notifier = smtp_from_mapping(read_email_yaml(yaml_path), {})
    return notifier.send(kind, subject, body), notifier.to


def plan_env_of(run: RunRow) -> dict[str, str]:
    """The plan's ``env:``, handed to an engine started for the run (masked values are dropped
    by the spawner)."""
    return dict(run.plan.env)


def _no_run_text(store: Store, run_id: int) -> str:
    """``no run 999 (runs here: 1-4; `lat-tui runs` lists them)``: the slip, and what to type instead."""
    ids = [run.id for run in store.runs()]
    span = f"{min(ids)}-{max(ids)}" if len(ids) > 1 else "".join(map(str, ids))
    held = f"runs here: {span}" if ids else "the journal holds no run yet"
    return f"no run {run_id} ({held}; `lat-tui runs` lists them)"


def _no_job_text(store: Store, job_id: int, run_id: int | None) -> str:
    """``no job 999 in run 3, the latest (its jobs are 31-40)``: the run named, else the latest."""
    run = store.run(run_id) if run_id is not None else store.latest_run()
    if run is None:
        return f"no job {job_id}: the journal holds no run yet"
    ids = [job.id for job in store.job_summaries(run.id)]
    held = f"its jobs are {min(ids)}-{max(ids)}" if ids else "it has no jobs"
    which = "" if run_id is not None else ", the latest"
    return f"no job {job_id} in run {run.id}{which} ({held}; `lat-tui status --run {run.id}` lists them)"


def _read_model_family(path: Path) -> str | None:
    """``model.family`` of a job.yaml; "" when the file names none, None when it is not there yet."""
    import yaml

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    model = data.get("model") if isinstance(data, dict) else None
    family = model.get("family") if isinstance(model, dict) else None
    return str(family) if family else ""


# ---------------------------------------------------------------------- the libraries' surface
def suite_registry(configs_dir: str | Path | None = None) -> SuiteRegistry:
    """The suites a plan can name: the user's config tree (``--configs`` or $LAT_CONFIGS) searched
    before the shipped one."""
    from lat_core.config.paths import config_trees
    from lat_core.config.suites import SuiteRegistry

    return SuiteRegistry(config_trees(configs_dir))


def read_plan_file(plan: str, configs_dir: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """``--plan`` as a file and its raw mapping: a path as given, a bare name (``demo``) from the
    config trees' ``plans/``; PlanError for a file that is not a plan's mapping."""
    from lat_core.config.paths import config_trees, find_plan
    from lat_core.front.plan import load_plan_mapping

    path = find_plan(plan, config_trees(configs_dir))
    return path, load_plan_mapping(path)


# What front ends use of the libraries below the client, so lat_tui imports this one module (the
# "tui-allowlist" contract in pyproject.toml). Each name is imported on first use (PEP 562), so the
# dashboard's first frame never pays for the plan model, results or triage; the TYPE_CHECKING
# imports above name the same things for type checkers (tests/unit/test_client_surface.py).
_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "lat_core.config.datasets": ("KNOWN_DATASETS",),
    "lat_core.config.email_yaml": ("OLD_EVENTS",),
    "lat_core.config.env": ("EMAIL_YAML_VAR", "MASK", "EnvValueError", "pair_from_env"),
    "lat_core.config.suites": ("SuiteRegistry",),
    "lat_core.contract.plan_defaults": ("PLAN_DEFAULTS",),
    "lat_core.front.plan": ("AUTO_REMEDIES", "Plan", "plan_from_mapping"),
    "lat_core.front.rerun": ("prepare_rerun",),
    "lat_core.front.warmup": ("plan_kernel_shapes", "warm_up_kernels"),
    "lat_core.monitor.gpu": ("GpuInfo", "GpuProbe", "GpuSnapshot"),
    "lat_core.monitor.host": ("HostSnapshot", "host_snapshot"),
    "lat_core.results": ("JobResult", "Report", "SweepTable", "Table", "aggregate", "build_sweeps", "build_tables",
                         "check_formats", "write_report"),
    "lat_core.results.live": ("LiveReport", "aggregate_live"),
    "lat_core.results.plots": ("Band", "seed_band"),
    "lat_core.results.render": ("count_text", "not_in_tables", "report_json", "summary_line", "table_markdown"),
    "lat_core.results.scan": ("FOREIGN_REASON",),
    "lat_core.results.sweep_render": ("best_line", "left_out_text", "point_count_text", "point_mean_text",
                                      "sweep_markdown"),
    "lat_core.results.tables": ("Row",),
    "lat_core.text": ("fmt_bytes", "value_text"),
    "lat_core.titles": ("display_name",),
    "lat_core.triage": ("Diagnosis", "TriageError", "classify"),
}
_HOME = {name: module for module, names in _ELSEWHERE.items() for name in names}


def __getattr__(name: str) -> Any:
    """A library name from _ELSEWHERE, imported now and kept here for the next lookup."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
