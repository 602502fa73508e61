"""The one door from the front ends into the core: read state, send commands, start runs.

Front ends (``lat_tui``) never open the journal themselves; they build a :class:`Client` from a
state directory and get typed, immutable rows back. Journal trouble (a locked or corrupt file, a
missing run) comes out as :class:`~lat_core.errors.JournalError`, so a caller catches one error type.

A journal connection belongs to the thread that opened it (SQLite's rule), and the TUI reads from
worker threads, so the client keeps one connection per thread.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lat_core.errors import JournalError
from lat_core.contract.job_files import resumable_checkpoints
from lat_core.contract.journal_faults import journal_faults
from lat_core.contract.rows import AttemptRow, GroupUsage, JobRow, JobSummary, RunRow, Transition
from lat_core.front.service import (JOURNAL_NAME, EngineLock, PreparedRun, create_run, default_state_dir, ensure_engine,
                              jobs_to_add, open_store, prepare_run)
from lat_core.contract.states import JOB_UNFINISHED
from lat_core.contract.journal import JOB_FINAL, RUN_ACTIVE, Store

if TYPE_CHECKING:  # a plan means pydantic: reading state never loads it
    from lat_core.front.plan import Plan

__all__ = ["Client", "CommandRow", "JOB_FINAL", "JOB_UNFINISHED", "RUN_ACTIVE", "NoRunError", "NoStateError", "ensure_engine", "plan_env_of",
           "resumable_checkpoints", "resolve_state_dir"]


class NoRunError(JournalError):
    title = "No run"


class NoStateError(JournalError):
    """A state directory without a journal: a mistyped --state-dir or $LAT_STATE_DIR, or no run ever."""

    title = "No state"


@dataclass(frozen=True)
class CommandRow:
    """A command a front end sent and, once the engine handled it, its answer."""

    id: int
    run_id: int
    job_id: int | None
    verb: str
    args: dict = field(default_factory=dict)
    status: str = "pending"  # pending | done | rejected | failed
    result: str = ""
    ts: float = 0.0
    handled: float | None = None

    @property
    def answered(self) -> bool:
        return self.status != "pending"


def resolve_state_dir(state_dir: str | Path | None) -> Path:
    """``--state-dir`` when given, else ``$LAT_STATE_DIR`` or the XDG default."""
    return Path(state_dir).expanduser() if state_dir else default_state_dir()


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
    def _journal(self):
        """The thread's journal; a fault in it (locked, full, read-only, damaged) is one JournalError
        that names the journal and says what to do."""
        with journal_faults(self.state_dir / JOURNAL_NAME):
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
        with self._journal() as store:
            return store.run(run_id)

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

    def engine_alive(self) -> bool:
        return EngineLock(self.state_dir).is_held()

    def engine_error(self, run_id: int) -> str | None:
        """Why the engine cannot serve the run right now (its last tick failed), else None."""
        with self._journal() as store:
            return store.engine_error(run_id)

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

    def fused_groups(self, run_id: int) -> dict[str, GroupUsage]:
        """The run's fused groups by id, with their measured memory (a member's is its group's)."""
        with self._journal() as store:
            return store.fused_groups(run_id)

    def job(self, job_id: int) -> JobRow:
        with self._journal() as store:
            return store.job(job_id)

    def model_family(self, job: JobSummary) -> str | None:
        """The model family of the job's resolved config: the journal's, or for a journal from
        before it was kept, job.yaml's ``model.family`` read once per job; None while the file is
        not written yet or names none."""
        if job.family:
            return job.family
        family = self._families.get(job.id)
        if family is None:
            family = _read_model_family(Path(job.job_dir) / "job.yaml")
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
            raw = store.command(command_id)
        return _command_row(raw)

    def send(self, run: RunRow, verb: str, job_id: int | None = None, *, start_engine: bool = True,
             **args) -> int:
        """Append a command for the engine; start one when none serves the state directory (an
        ended run has no engine, and its commands still need one). Returns the command id."""
        with self._journal() as store:
            command_id = store.add_command(run.id, verb, job_id=job_id, **args)
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
    def new_run(self, plan: Plan, *, registry=None, probe=None) -> tuple[RunRow, PreparedRun]:
        """Check the plan against the machine, then write the run's folders and journal rows (the
        engine is not started here). Raises LatError, with nothing written, when it cannot start."""
        prepared = prepare_run(plan, registry=registry, probe=probe)
        return self.create_prepared(prepared), prepared

    def create_prepared(self, prepared: PreparedRun) -> RunRow:
        """Write a run whose jobs are already expanded (a rerun of one job folder)."""
        with self._journal() as store:
            return store.run(create_run(store, prepared))

    def jobs_to_add(self, run: RunRow, suites: list[str], rounds, pairs, registry) -> list[dict]:
        """Records for more jobs in ``run``; refused (PlanError) where a live run owns their folders."""
        return jobs_to_add(run, suites, rounds, pairs, registry, self.state_dir)


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


def _command_row(raw: dict) -> CommandRow:
    import json

    return CommandRow(id=raw["id"], run_id=raw["run_id"], job_id=raw["job_id"], verb=raw["verb"],
                      args=json.loads(raw.get("args_json") or "{}"), status=raw["status"],
                      result=raw.get("result") or "", ts=raw["ts"], handled=raw.get("handled"))


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
