"""The journal: one SQLite database (WAL; on a network filesystem DELETE, see
:mod:`lat_core.contract.filesystems`) per state directory, the single source of truth.

The engine is the only writer of job and run state; front ends read it and append commands. Every
state change is recorded as a transition, so a job's whole history can be shown.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypedDict, Unpack

from lat_core.contract.commands import Command, CommandRow, decode, encode
from lat_core.contract.devices import Device
from lat_core.contract.diagnosis import Diagnosis
from lat_core.errors import JournalError, NoJobError, NoSuchRunError
from lat_core.contract import filesystems
from lat_core.contract.journal_faults import WalWatch, check_journal_file, check_wal, journal_faults, journal_timeout_s
from lat_core.contract.rows import (
    GROUP_COLUMNS, SUMMARY_COLUMNS, AttemptRow, GroupUsage, JobRow, JobSummary, RunRow, SweptJob, Transition, job_row,
    job_summary, run_row,
)
from lat_core.contract.sweep_roles import Stage, SweepRole
from lat_core.contract.states import JOB_FINAL, RUN_ACTIVE, RUN_ENDED, HistoryKind, JobState, RunState, history_entry
from lat_core.titles import display_name

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY, created REAL NOT NULL, state TEXT NOT NULL, plan_yaml TEXT NOT NULL,
  output_root TEXT NOT NULL, devices_json TEXT NOT NULL, countdown_until REAL NOT NULL DEFAULT 0,
  started REAL, ended REAL, paused INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id), seq INTEGER NOT NULL,
  key TEXT NOT NULL, suite TEXT NOT NULL, round INTEGER NOT NULL, stem TEXT NOT NULL,
  seed INTEGER NOT NULL, dataset TEXT NOT NULL, job_dir TEXT NOT NULL, argv_json TEXT NOT NULL,
  env_json TEXT NOT NULL, state TEXT NOT NULL, device TEXT, attempts INTEGER NOT NULL DEFAULT 0,
  started REAL, ended REAL, returncode INTEGER, last_step INTEGER, last_loss REAL, error TEXT,
  diagnosis_json TEXT, rss INTEGER, gpu_mem INTEGER, peak_rss INTEGER, peak_gpu INTEGER, waiting TEXT,
  world INTEGER NOT NULL DEFAULT 1, use_libuv INTEGER NOT NULL DEFAULT 1,
  avoid_devices_json TEXT NOT NULL DEFAULT '[]', backend_options_json TEXT NOT NULL DEFAULT '{}',
  not_before REAL NOT NULL DEFAULT 0, added REAL, family TEXT, fused_group TEXT,
  after_json TEXT NOT NULL DEFAULT '[]', sweep_json TEXT, held TEXT,
  UNIQUE (run_id, key)
);
CREATE TABLE IF NOT EXISTS attempts (
  id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs(id), n INTEGER NOT NULL,
  device TEXT NOT NULL, pid INTEGER, pid_start REAL, launched REAL NOT NULL, ended REAL,
  returncode INTEGER, exit_path TEXT NOT NULL, cancel_at REAL, oom_source TEXT, oom_before INTEGER,
  stop_reason TEXT
);
CREATE TABLE IF NOT EXISTS transitions (
  id INTEGER PRIMARY KEY, ts REAL NOT NULL, run_id INTEGER NOT NULL, job_id INTEGER,
  old_state TEXT, new_state TEXT NOT NULL, detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS commands (
  id INTEGER PRIMARY KEY, ts REAL NOT NULL, run_id INTEGER NOT NULL, job_id INTEGER,
  verb TEXT NOT NULL, args_json TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL DEFAULT 'pending',
  handled REAL, result TEXT
);
CREATE TABLE IF NOT EXISTS samples (
  id INTEGER PRIMARY KEY, ts REAL NOT NULL, job_id INTEGER NOT NULL, rss INTEGER, gpu_mem INTEGER
);
CREATE TABLE IF NOT EXISTS config_peaks (
  key TEXT PRIMARY KEY, peak_gpu INTEGER NOT NULL, peak_rss INTEGER NOT NULL, runs INTEGER NOT NULL, updated REAL
);
-- a fused group's measured usage: its process tree is shared, so it is the group's, never a member's
-- (members: how many it started with; full_*: its peak while all of them were in it)
CREATE TABLE IF NOT EXISTS fused_groups (
  id TEXT PRIMARY KEY, run_id INTEGER NOT NULL, members INTEGER NOT NULL, device TEXT,
  rss INTEGER, gpu_mem INTEGER, peak_rss INTEGER, peak_gpu INTEGER, full_rss INTEGER, full_gpu INTEGER
);
-- what a group of ``members`` jobs that held this config needed (its full peak): admission fits
-- base + members x per-member cost from these and the config's peak alone (config_peaks)
CREATE TABLE IF NOT EXISTS group_peaks (
  key TEXT NOT NULL, members INTEGER NOT NULL, peak_gpu INTEGER NOT NULL, peak_rss INTEGER NOT NULL,
  runs INTEGER NOT NULL, updated REAL, PRIMARY KEY (key, members)
);
CREATE INDEX IF NOT EXISTS jobs_run ON jobs(run_id, state);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(run_id, state, seq);
CREATE INDEX IF NOT EXISTS transitions_run ON transitions(run_id, id);
-- a job's attempts, and the open ones (what every tick reaps): without them each such query read
-- every attempt the state directory ever had
CREATE INDEX IF NOT EXISTS attempts_job ON attempts(job_id, n);
CREATE INDEX IF NOT EXISTS attempts_open ON attempts(job_id) WHERE ended IS NULL;
-- the commands still to handle, which every tick asks for, among all ever sent
CREATE INDEX IF NOT EXISTS commands_pending ON commands(run_id) WHERE status='pending';
"""

# indexes on columns added since the first journals: made once an older journal has the columns
LATER_INDEXES = """
-- the queued jobs that wait for others (what the engine checks every tick), among all queued
CREATE INDEX IF NOT EXISTS jobs_after ON jobs(run_id, state) WHERE after_json != '[]';
-- a two-stage search's full jobs that wait for its stage 1 to end, and a run's sweep jobs
CREATE INDEX IF NOT EXISTS jobs_held ON jobs(run_id, state) WHERE held IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_swept ON jobs(run_id) WHERE sweep_json IS NOT NULL;
"""


def _earlier_s(jobs: str = "jobs") -> str:
    """JobSummary.earlier_s as a column of a query on ``jobs`` (the table's name or alias there):
    the time of the attempts before its latest, each from launch to end (index attempts_job)."""
    return (f"(SELECT COALESCE(SUM(a.ended - a.launched), 0) FROM attempts a WHERE a.job_id = {jobs}.id"
            f" AND a.n < {jobs}.attempts AND a.ended IS NOT NULL) AS earlier_s")


_SUMMARY_SELECT = ", ".join(_earlier_s() if name == "earlier_s" else name for name in SUMMARY_COLUMNS)
_JOB_SELECT = f"*, {_earlier_s()}"  # a JobRow: every column and the same computed one
_GROUP_SELECT = ", ".join(GROUP_COLUMNS)
PAUSED_BY_USER = "admission paused"

__all__ = ["JOB_FINAL", "RUN_ACTIVE", "JobState", "RunState", "Store"]


_CHECKED: set[str] = set()  # journals this process has checked for damage (at its first open of each)


def _check_once_per_process(path: Path) -> None:
    """Damage checks that read the journal and its -shm as plain files. Only before this process's
    first connection: closing any descriptor of those files drops every POSIX lock the process holds
    on them, SQLite's included, and its other connections could then read a frozen journal (another
    process, believing itself the last, checkpoints and deletes the WAL under them)."""
    key = str(path.resolve())
    if key in _CHECKED:
        return
    check_journal_file(path)
    check_wal(path)
    _CHECKED.add(key)


class Store:
    """A connection to one journal file. Cheap to open; one per process/thread."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with journal_faults(self.path):  # full, read-only, locked, damaged: one clear JournalError
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _check_once_per_process(self.path)
            self._db = _connect(self.path, journal_timeout_s())
        self._wal = WalWatch(self.path)

    def close(self) -> None:
        self._db.close()
        self._wal.close()

    def check_wal(self) -> None:
        """WalLost when the journal's -wal file was removed or replaced under this connection."""
        self._wal.check()

    def check_writable(self) -> None:
        """Take and release the write lock: a journal locked past the timeout (or read-only) fails
        here, before a caller writes anything elsewhere (job folders) that it would orphan."""
        with self._tx():
            pass

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._wal.check)

    def batch(self) -> _Transaction:
        """One transaction for several writes (``with store.batch(): ...``): one commit where each
        write would have committed on its own, and all of them or none. Keep what runs inside
        short: the journal's write lock is held until the end."""
        return self._tx()

    # ------------------------------------------------------------------ runs
    def create_run(self, plan_yaml: str, output_root: str, devices: Iterable[Device | Mapping[str, Any]],
                   countdown_until: float) -> int:
        now = time.time()
        state = RunState.COUNTDOWN if countdown_until > now else RunState.RUNNING
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO runs (created, state, plan_yaml, output_root, devices_json, countdown_until, started)"
                " VALUES (?,?,?,?,?,?,?)",
                (now, state, plan_yaml, output_root, _devices_json(devices), countdown_until,
                 now if state is RunState.RUNNING else None),
            )
            run_id = _new_id(cur)
            _transition(db, run_id, None, None, state, "run created")
        return run_id

    def run(self, run_id: int) -> RunRow:
        row = self._db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise NoSuchRunError(f"no run {run_id}", where=str(self.path))
        return run_row(row)

    def runs(self) -> list[RunRow]:
        return [run_row(r) for r in self._db.execute("SELECT * FROM runs ORDER BY id")]

    def latest_run(self) -> RunRow | None:
        row = self._db.execute("SELECT * FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        return run_row(row) if row else None

    def active_runs(self) -> list[RunRow]:
        marks = ",".join("?" * len(RUN_ACTIVE))
        rows = self._db.execute(f"SELECT * FROM runs WHERE state IN ({marks}) ORDER BY id", RUN_ACTIVE)
        return [run_row(r) for r in rows]

    def active_run_ids(self) -> list[int]:
        """As :meth:`active_runs`, ids only: nothing decoded (a run row carries its plan and devices)."""
        marks = ",".join("?" * len(RUN_ACTIVE))
        return [r[0] for r in self._db.execute(f"SELECT id FROM runs WHERE state IN ({marks}) ORDER BY id", RUN_ACTIVE)]

    def set_run_state(self, run_id: int, state: RunState, detail: str = "") -> None:
        with self._tx() as db:
            old = db.execute("SELECT state FROM runs WHERE id=?", (run_id,)).fetchone()["state"]
            if old == state:
                return
            state = RunState(state)
            ended = time.time() if state in RUN_ENDED else None  # a run reopened (jobs requeued) has not ended
            started = time.time() if state is RunState.RUNNING else None
            db.execute(
                "UPDATE runs SET state=?, ended=?, started=COALESCE(started, ?) WHERE id=?",
                (state, ended, started, run_id),
            )
            _transition(db, run_id, None, old, state, detail)

    def set_countdown(self, run_id: int, until: float) -> None:
        with self._tx() as db:
            db.execute("UPDATE runs SET countdown_until=? WHERE id=?", (until, run_id))

    def set_paused(self, run_id: int, paused: bool, reason: str | None = None) -> None:
        """Pause or resume the run's admission; a pause's ``reason`` (None: the user's) goes into its
        history and is what every queued job of the paused run says it waits for (:meth:`pause_reason`)."""
        with self._tx() as db:
            db.execute("UPDATE runs SET paused=? WHERE id=?", (int(paused), run_id))
            _transition(db, run_id, None, None, HistoryKind.PAUSED if paused else HistoryKind.RESUMED,
                        reason or "admission")

    def pause_reason(self, run_id: int) -> str:
        """Why the run's admission is paused: the reason its last pause was given."""
        row = self._db.execute("SELECT detail FROM transitions WHERE run_id=? AND job_id IS NULL AND new_state=?"
                               " ORDER BY id DESC LIMIT 1", (run_id, HistoryKind.PAUSED)).fetchone()
        return PAUSED_BY_USER if row is None or row[0] == "admission" else row[0]

    def set_devices(self, run_id: int, devices: Iterable[Device | Mapping[str, Any]]) -> None:
        with self._tx() as db:
            db.execute("UPDATE runs SET devices_json=? WHERE id=?", (_devices_json(devices), run_id))

    # ------------------------------------------------------------------ jobs
    def add_jobs(self, run_id: int, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
        """Insert jobs in order (dicts with key, suite, round, stem, seed, dataset, job_dir, argv, env;
        optional state, world, use_libuv, family, the jobs each waits for: ``after_keys``, keys
        of the run's jobs, these included, and ``after_ids``, ids of any jobs of the journal, and
        ``sweep``: its :class:`SweepRole` in a two-stage search, a full job held until its search's
        stage 1 ends)."""
        ids = []
        jobs = list(jobs)
        with self._tx() as db:
            start = db.execute("SELECT COALESCE(MAX(seq), 0) FROM jobs WHERE run_id=?", (run_id,)).fetchone()[0]
            for offset, job in enumerate(jobs, start=1):
                state = JobState(job.get("state", JobState.QUEUED))
                cur = db.execute(
                    "INSERT INTO jobs (run_id, seq, key, suite, round, stem, seed, dataset, job_dir,"
                    " argv_json, env_json, state, world, use_libuv, added, family) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, start + offset, job["key"], job["suite"], job["round"], job["stem"], job["seed"],
                     job["dataset"], job["job_dir"], json.dumps(job["argv"]), json.dumps(job["env"]),
                     state, job.get("world", 1), int(job.get("use_libuv", True)), time.time(), job.get("family")),
                )
                ids.append(_new_id(cur))
                detail = "already succeeded earlier; overwrite reruns it" if state is JobState.SUCCEEDED else ""
                _transition(db, run_id, ids[-1], None, state, detail)
            _set_after(db, run_id, list(zip(ids, jobs)))
            _set_roles(db, list(zip(ids, jobs)))
        return ids

    def jobs(self, run_id: int) -> list[JobRow]:
        rows = self._db.execute(f"SELECT {_JOB_SELECT} FROM jobs WHERE run_id=? ORDER BY seq", (run_id,))
        return [job_row(r) for r in rows]

    def job_summaries(self, run_id: int) -> list[JobSummary]:
        """The run's jobs as a table shows them, in order: only plain columns, nothing decoded."""
        cursor = self._db.cursor()
        cursor.row_factory = None  # plain tuples: a named row per job costs more than the query
        rows = cursor.execute(f"SELECT {_SUMMARY_SELECT} FROM jobs WHERE run_id=? ORDER BY seq", (run_id,))
        return [job_summary(r) for r in rows]

    def job(self, job_id: int) -> JobRow:
        row = self._db.execute(f"SELECT {_JOB_SELECT} FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise NoJobError(f"no job {job_id}", where=str(self.path))
        return job_row(row)

    def set_job_state(self, job_id: int, state: JobState, detail: str = "", **fields: Unpack[JobFields]) -> None:
        with self._tx() as db:
            _set_job_state(db, job_id, JobState(state), detail, fields)

    def set_job_env(self, job_id: int, env: Mapping[str, str]) -> None:
        from lat_core.config.env import mask_env

        with self._tx() as db:
            db.execute("UPDATE jobs SET env_json=? WHERE id=?", (json.dumps(mask_env(dict(env))), job_id))

    def set_job_argv(self, job_id: int, argv: list[str]) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET argv_json=? WHERE id=?", (json.dumps(argv), job_id))

    def set_job_avoid_devices(self, job_id: int, devices: list[str]) -> None:
        """Devices this job is never placed on again (a remedy after a device fault)."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET avoid_devices_json=? WHERE id=?", (json.dumps(sorted(set(devices))), job_id))

    def set_job_backend_options(self, job_id: int, options: Mapping[str, Any]) -> None:
        """Per-job backend options (Slurm ``time``, ``mem``) that override the plan's for this job."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET backend_options_json=? WHERE id=?", (json.dumps(dict(options)), job_id))

    def set_progress(self, job_id: int, step: int | None, loss: float | None) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET last_step=?, last_loss=? WHERE id=?", (step, loss, job_id))

    def record_usage(self, usage: Mapping[int, tuple[int | None, int | None]]) -> None:
        """Latest and peak RSS / GPU memory per job, plus a sample row for later plots."""
        now = time.time()
        with self._tx() as db:
            for job_id, (rss, gpu) in usage.items():
                db.execute(
                    "UPDATE jobs SET rss=?, gpu_mem=?, peak_rss=MAX(COALESCE(peak_rss, 0), ?),"
                    " peak_gpu=MAX(COALESCE(peak_gpu, 0), ?) WHERE id=?", (rss, gpu, rss, gpu, job_id))
                db.execute("INSERT INTO samples (ts, job_id, rss, gpu_mem) VALUES (?,?,?,?)", (now, job_id, rss, gpu))

    def record_peak_rss(self, job_id: int, rss: int) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET peak_rss=MAX(COALESCE(peak_rss, 0), ?) WHERE id=?", (rss, job_id))

    def set_waiting(self, job_id: int, reason: str | None) -> None:
        """Why a queued job is held back (memory, settling); shown by front ends, not a transition."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET waiting=? WHERE id=? AND COALESCE(waiting, '') != COALESCE(?, '')",
                       (reason, job_id, reason))

    def set_waiting_after(self, run_id: int, after_seq: int, reason: str) -> None:
        """The same reason for every queued job of the run after ``after_seq`` (all slots taken, or
        admission paused): one statement, however many jobs wait. A job still waiting for another's
        success keeps saying so (:meth:`queued_dependents`)."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET waiting=? WHERE run_id=? AND state='queued' AND seq>? "
                       f"AND COALESCE(waiting, '') != ? AND {_NOT_WAITING_FOR_OTHERS}",
                       (reason, run_id, after_seq, reason))

    def queued_dependents(self, run_id: int) -> list[tuple[int, tuple[int, ...], str | None]]:
        """(id, the jobs it waits for, its waiting reason) of the run's queued jobs that wait for
        others' success (index jobs_after: a tick reads these, not every queued job)."""
        rows = self._db.execute("SELECT id, after_json, waiting FROM jobs WHERE run_id=? AND state='queued'"
                                " AND after_json != '[]' ORDER BY seq", (run_id,))
        return [(job_id, tuple(json.loads(after)), waiting) for job_id, after, waiting in rows]

    def held_jobs(self, run_id: int) -> list[tuple[int, str, str | None]]:
        """(id, its search, its waiting reason) of the run's queued full jobs of a two-stage search
        still held until its stage 1 ends (index jobs_held)."""
        rows = self._db.execute("SELECT id, held, waiting FROM jobs WHERE run_id=? AND state='queued'"
                                " AND held IS NOT NULL ORDER BY seq", (run_id,))
        return [(job_id, held, waiting) for job_id, held, waiting in rows]

    def swept_jobs(self, run_id: int) -> list[SweptJob]:
        """The run's jobs that have a part in a two-stage search (index jobs_swept), in plan order."""
        rows = self._db.execute("SELECT id, state, key, dataset, job_dir, sweep_json FROM jobs WHERE run_id=?"
                                " AND sweep_json IS NOT NULL ORDER BY seq", (run_id,))
        return [SweptJob(r[0], JobState(r[1]), r[2], r[3], r[4], SweepRole.from_json(r[5])) for r in rows]

    def screening_counts(self, run_id: int) -> dict[str, tuple[int, int]]:
        """search -> (its stage-1 jobs not ended yet, all of them), for the run's two-stage searches:
        what a tick needs while stage 1 runs, counted by SQLite (no role decoded)."""
        marks = ",".join("?" * len(JOB_FINAL))
        rows = self._db.execute(
            f"SELECT json_extract(sweep_json, '$.search'), SUM(state NOT IN ({marks})), COUNT(*) FROM jobs"
            " WHERE run_id=? AND sweep_json IS NOT NULL AND json_extract(sweep_json, '$.stage')=? GROUP BY 1",
            (*JOB_FINAL, run_id, Stage.SCREEN.value))
        return {search: (unended, total) for search, unended, total in rows}

    def release(self, job_ids: Iterable[int], detail: str) -> None:
        """Held jobs that may start now (their search promoted them): the reason in each one's history."""
        with self._tx() as db:
            for job_id in job_ids:
                db.execute("UPDATE jobs SET held=NULL, waiting=NULL WHERE id=?", (job_id,))
                run_id = db.execute("SELECT run_id FROM jobs WHERE id=?", (job_id,)).fetchone()[0]
                _transition(db, run_id, job_id, None, HistoryKind.SWEEP, detail)

    def job_states(self, job_ids: Iterable[int]) -> dict[int, tuple[JobState, str]]:
        """job id -> (state, name) of those of ``job_ids`` the journal holds, in any run; the name is
        the job tables' (lat_core.titles.display_name), as the waiting reasons built from it say it."""
        ids = sorted(set(job_ids))
        found: dict[int, tuple[JobState, str]] = {}
        for start in range(0, len(ids), 500):  # SQLite caps the variables of one statement
            chunk = ids[start:start + 500]
            rows = self._db.execute("SELECT id, state, family, stem, seed, dataset FROM jobs"
                                    f" WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            found.update({job_id: (JobState(state), display_name(family, stem, seed, dataset))
                          for job_id, state, family, stem, seed, dataset in rows})
        return found

    def record_config_peak(self, key: str, peak_gpu: int, peak_rss: int) -> None:
        """The largest peak seen for a config on a dataset: what admission expects it to need."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO config_peaks (key, peak_gpu, peak_rss, runs, updated) VALUES (?,?,?,1,?)"
                " ON CONFLICT(key) DO UPDATE SET peak_gpu=MAX(peak_gpu, excluded.peak_gpu),"
                " peak_rss=MAX(peak_rss, excluded.peak_rss), runs=runs+1, updated=excluded.updated",
                (key, peak_gpu, peak_rss, time.time()))

    def config_peak(self, key: str) -> tuple[int, int] | None:
        row = self._db.execute("SELECT peak_gpu, peak_rss FROM config_peaks WHERE key=?", (key,)).fetchone()
        return (row[0], row[1]) if row else None

    def family_peak(self, suite: str, dataset: str) -> tuple[int, int] | None:
        """The largest peaks measured for any config of ``suite`` on ``dataset``."""
        def esc(text: str) -> str:
            return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        row = self._db.execute("SELECT MAX(peak_gpu), MAX(peak_rss) FROM config_peaks WHERE key LIKE ? ESCAPE '\\'",
                               (f"{esc(suite)}/%|{esc(dataset)}",)).fetchone()
        return (row[0], row[1]) if row and row[0] is not None else None

    # ------------------------------------------------------------------ fused groups' usage
    def start_group(self, group_id: str, run_id: int, device: str, members: int, job_ids: list[int]) -> None:
        """A fused group of ``members`` jobs (its usage is measured for the group, not per member),
        and the link to it of ``job_ids`` (all of them at launch; one adopted after a lost tail)."""
        with self._tx() as db:
            db.execute("INSERT INTO fused_groups (id, run_id, members, device) VALUES (?,?,?,?)"
                       " ON CONFLICT(id) DO NOTHING", (group_id, run_id, members, device))
            db.executemany("UPDATE jobs SET fused_group=? WHERE id=?", [(group_id, j) for j in job_ids])

    def groups_of(self, job_ids: Iterable[int]) -> dict[int, str]:
        """job id -> its fused group, for those of ``job_ids`` whose current attempt is a member."""
        ids = list(job_ids)
        rows = self._db.execute(f"SELECT id, fused_group FROM jobs WHERE fused_group IS NOT NULL AND id IN "
                                f"({','.join('?' * len(ids))})", ids) if ids else []
        return {r[0]: r[1] for r in rows}

    def record_group_usage(self, group_id: str, members_in: int, rss: int, gpu: int) -> None:
        """The group's latest and peak usage; its full peak too while all its members are in it."""
        with self._tx() as db:
            db.execute("UPDATE fused_groups SET rss=?, gpu_mem=?, peak_rss=MAX(COALESCE(peak_rss, 0), ?),"
                       " peak_gpu=MAX(COALESCE(peak_gpu, 0), ?),"
                       " full_rss=CASE WHEN members=? THEN MAX(COALESCE(full_rss, 0), ?) ELSE full_rss END,"
                       " full_gpu=CASE WHEN members=? THEN MAX(COALESCE(full_gpu, 0), ?) ELSE full_gpu END"
                       " WHERE id=?", (rss, gpu, rss, gpu, members_in, rss, members_in, gpu, group_id))

    def record_group_peak_rss(self, group_id: str, rss: int) -> None:
        """The kernel's peak RSS of the group's process (when reached is unknown: not a full peak)."""
        with self._tx() as db:
            db.execute("UPDATE fused_groups SET peak_rss=MAX(COALESCE(peak_rss, 0), ?) WHERE id=?", (rss, group_id))

    def fused_group(self, group_id: str) -> GroupUsage | None:
        row = self._db.execute(f"SELECT {_GROUP_SELECT} FROM fused_groups WHERE id=?", (group_id,)).fetchone()
        return GroupUsage(*row) if row else None

    def fused_groups(self, run_id: int) -> dict[str, GroupUsage]:
        rows = self._db.execute(f"SELECT {_GROUP_SELECT} FROM fused_groups WHERE run_id=?", (run_id,))
        return {r[0]: GroupUsage(*r) for r in rows}

    def record_group_peak(self, key: str, members: int, peak_gpu: int, peak_rss: int) -> None:
        """A config's peak measured in a group of ``members`` (the largest seen at that size)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO group_peaks (key, members, peak_gpu, peak_rss, runs, updated) VALUES (?,?,?,?,1,?)"
                " ON CONFLICT(key, members) DO UPDATE SET peak_gpu=MAX(peak_gpu, excluded.peak_gpu),"
                " peak_rss=MAX(peak_rss, excluded.peak_rss), runs=runs+1, updated=excluded.updated",
                (key, members, peak_gpu, peak_rss, time.time()))

    def group_peaks(self, key: str) -> dict[int, tuple[int, int]]:
        """members -> (GPU, RSS) peaks of the groups of that size this config was measured in."""
        rows = self._db.execute("SELECT members, peak_gpu, peak_rss FROM group_peaks WHERE key=?", (key,))
        return {r[0]: (r[1], r[2]) for r in rows}

    def samples(self, job_id: int) -> list[tuple[float, int | None, int | None]]:
        rows = self._db.execute("SELECT ts, rss, gpu_mem FROM samples WHERE job_id=? ORDER BY id", (job_id,))
        return [(r[0], r[1], r[2]) for r in rows]

    # The engine's per-tick reads: each touches only the active jobs (index jobs_run), so a tick
    # costs the same with 10 or 10,000 jobs queued behind the busy slots.
    def queued_jobs(self, run_id: int, limit: int | None = None, after_seq: int = 0) -> list[JobRow]:
        """Queued jobs in plan order, from ``after_seq`` on, at most ``limit`` of them."""
        rows = self._db.execute(f"SELECT {_JOB_SELECT} FROM jobs WHERE run_id=? AND state='queued' AND seq>? ORDER BY seq LIMIT ?",
                                (run_id, after_seq, -1 if limit is None else limit))
        return [job_row(r) for r in rows]

    def queued_heads(self, run_id: int, limit: int) -> list[tuple[int, int]]:
        """(id, attempts) of the first ``limit`` queued jobs in plan order, nothing decoded."""
        rows = self._db.execute("SELECT id, attempts FROM jobs WHERE run_id=? AND state='queued' ORDER BY seq LIMIT ?",
                                (run_id, limit))
        return [(job_id, attempts) for job_id, attempts in rows]

    def iter_queued(self, run_id: int, first_page: int = 4, max_page: int = 64) -> Iterator[JobRow]:
        """Queued jobs in plan order, read a page at a time, each page twice the last: a caller that
        stops early (a slot or two free, the rest waiting) decodes a few rows, one that walks far
        (jobs waiting for memory) few queries. A job started while its page is in use is never
        read again."""
        after, page = 0, first_page
        while batch := self.queued_jobs(run_id, page, after):
            for job in batch:
                yield job
            after, page = batch[-1].seq, min(page * 2, max_page)

    def running_jobs(self, run_id: int) -> list[JobRow]:
        rows = self._db.execute(f"SELECT {_JOB_SELECT} FROM jobs WHERE run_id=? AND state='running' ORDER BY seq", (run_id,))
        return [job_row(r) for r in rows]

    def has_unfinished_jobs(self, run_id: int) -> bool:
        """True while any job of the run is not in a final state; stops at the first one found."""
        marks = ",".join("?" * len(JOB_FINAL))
        return self._db.execute(f"SELECT 1 FROM jobs WHERE run_id=? AND state NOT IN ({marks}) LIMIT 1",
                                (run_id, *JOB_FINAL)).fetchone() is not None

    def job_counts(self, run_id: int) -> dict[str, int]:
        """state -> number of the run's jobs in it (states with none left out)."""
        rows = self._db.execute("SELECT state, COUNT(*) FROM jobs WHERE run_id=? GROUP BY state", (run_id,))
        return {state: n for state, n in rows}

    # ------------------------------------------------------------------ attempts
    def start_attempt(self, job_id: int, device: str, exit_path: str, started: float | None = None,
                      detail: str | None = None) -> tuple[int, int]:
        """Record an attempt and set the job ``running``, in one transaction, before launching it:
        a crash can never leave an attempt without its running job, or a running job without its
        attempt (so a launch is never lost, nor done twice). Returns (attempt id, attempt number)."""
        with self._tx() as db:
            n = db.execute("SELECT attempts FROM jobs WHERE id=?", (job_id,)).fetchone()[0] + 1
            cur = db.execute(
                "INSERT INTO attempts (job_id, n, device, launched, exit_path) VALUES (?,?,?,?,?)",
                (job_id, n, device, time.time(), exit_path),
            )
            fields = JobFields(attempts=n, device=device, started=started or time.time(), ended=None,
                               returncode=None, error=None, fused_group=None)  # a group sets its own after
            _set_job_state(db, job_id, JobState.RUNNING, detail or f"attempt {n} on {device}", fields)
        return _new_id(cur), n

    def set_attempt_pid(self, attempt_id: int, pid: int | str, pid_start: float | None,
                        oom_counter: tuple[str, int | None] | None = None) -> None:
        """The launched runner's pid and start time; with ``oom_counter`` (source, count), the
        kernel's OOM-kill count at launch in the same transaction, so a later SIGKILL can be proven a host OOM."""
        with self._tx() as db:
            db.execute("UPDATE attempts SET pid=?, pid_start=? WHERE id=?", (pid, pid_start, attempt_id))
            if oom_counter is not None:
                db.execute("UPDATE attempts SET oom_source=?, oom_before=? WHERE id=?", (*oom_counter, attempt_id))

    def finish_attempt(self, attempt_id: int, returncode: int | None, state: JobState, detail: str,
                       **fields: Unpack[EndFields]) -> bool:
        """End an attempt and set its job's final state in one transaction. Only a job still
        ``running`` changes state (a success, or a cancel already recorded, is never overwritten);
        the attempt ends either way. True when the job's state was set."""
        with self._tx() as db:
            db.execute("UPDATE attempts SET ended=COALESCE(ended, ?), returncode=COALESCE(returncode, ?) WHERE id=?",
                       (time.time(), returncode, attempt_id))
            job_id = db.execute("SELECT job_id FROM attempts WHERE id=?", (attempt_id,)).fetchone()[0]
            if db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()[0] != JobState.RUNNING:
                return False
            _set_job_state(db, job_id, JobState(state), detail, JobFields(returncode=returncode, **fields))
        return True

    def running_without_attempt(self, run_id: int) -> list[JobRow]:
        """Jobs ``running`` with no open attempt: what a crash between two journal writes of an
        older engine could leave; the engine's recovery pass settles them."""
        rows = self._db.execute(
            f"SELECT j.*, {_earlier_s('j')} FROM jobs j WHERE run_id=? AND state=? AND NOT EXISTS"
            " (SELECT 1 FROM attempts a WHERE a.job_id=j.id AND a.ended IS NULL) ORDER BY seq",
            (run_id, JobState.RUNNING))
        return [job_row(r) for r in rows]

    def request_cancel(self, attempt_id: int, when: float) -> None:
        """Persisted, so an engine restarted mid-cancel still records the job as cancelled."""
        with self._tx() as db:
            db.execute("UPDATE attempts SET cancel_at=COALESCE(cancel_at, ?) WHERE id=?", (when, attempt_id))

    def request_stop(self, attempt_id: int, when: float, reason: str) -> bool:
        """A cancel that the sweep's halving asks for: the job ends ``pruned`` with ``reason``. False
        when the attempt was already being cancelled (a user's cancel stays one)."""
        with self._tx() as db:
            cur = db.execute("UPDATE attempts SET cancel_at=?, stop_reason=? WHERE id=? AND cancel_at IS NULL",
                             (when, reason, attempt_id))
        return cur.rowcount == 1

    def open_attempts(self, run_id: int) -> list[AttemptRow]:
        # CROSS JOIN keeps the open attempts (index attempts_open) the outer loop: the planner would
        # otherwise walk every job of the run, 10,000 index probes for a few running jobs
        rows = self._db.execute(
            "SELECT a.* FROM attempts a CROSS JOIN jobs j ON a.job_id=j.id WHERE a.ended IS NULL AND j.run_id=?"
            " ORDER BY a.id", (run_id,),
        )
        return [AttemptRow(**dict(r)) for r in rows]

    def attempts(self, job_id: int) -> list[AttemptRow]:
        rows = self._db.execute("SELECT * FROM attempts WHERE job_id=? ORDER BY n", (job_id,))
        return [AttemptRow(**dict(r)) for r in rows]

    # ------------------------------------------------------------------ history and commands
    def transitions(self, run_id: int, after_id: int = 0, job_id: int | None = None) -> list[Transition]:
        sql = "SELECT * FROM transitions WHERE run_id=? AND id>?"
        args: list[object] = [run_id, after_id]
        if job_id is not None:
            sql += " AND job_id=?"
            args.append(job_id)
        return [Transition(**dict(r)) for r in self._db.execute(sql + " ORDER BY id", args)]

    def engine_error(self, run_id: int) -> str | None:
        """Why the engine cannot serve the run right now (its last tick failed), else None."""
        row = self._db.execute(
            "SELECT new_state, detail FROM transitions WHERE run_id=? AND job_id IS NULL AND new_state IN (?,?)"
            " ORDER BY id DESC LIMIT 1", (run_id, HistoryKind.ENGINE_ERROR, HistoryKind.ENGINE_RECOVERED)).fetchone()
        return row["detail"] if row and row["new_state"] == HistoryKind.ENGINE_ERROR else None

    def add_transition(self, run_id: int, job_id: int | None, kind: HistoryKind, detail: str = "",
                       about: str | None = None) -> None:
        """History entries that are not state changes (notices sent, ...); ``about``: what a notice
        or command entry is about (:func:`lat_core.contract.states.history_entry`)."""
        with self._tx() as db:
            _transition(db, run_id, job_id, None, history_entry(HistoryKind(kind), about), detail)

    def add_command(self, run_id: int, command: Command) -> int:
        kind, job_id, args_json = encode(command)
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO commands (ts, run_id, job_id, verb, args_json) VALUES (?,?,?,?,?)",
                (time.time(), run_id, job_id, kind, args_json),
            )
        return _new_id(cur)

    def runs_with_pending_commands(self) -> list[int]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT run_id FROM commands WHERE status='pending'")]

    def pending_commands(self, run_id: int) -> list[CommandRow]:
        rows = self._db.execute(
            "SELECT * FROM commands WHERE run_id=? AND status='pending' ORDER BY id", (run_id,)
        )
        return [_command_row(r) for r in rows]

    def command(self, command_id: int) -> CommandRow:
        return _command_row(self._db.execute("SELECT * FROM commands WHERE id=?", (command_id,)).fetchone())

    def finish_command(self, command_id: int, status: str, result: str = "") -> None:
        with self._tx() as db:
            row = db.execute("SELECT run_id, job_id, verb FROM commands WHERE id=?", (command_id,)).fetchone()
            db.execute("UPDATE commands SET status=?, handled=?, result=? WHERE id=?",
                       (status, time.time(), result, command_id))
            _transition(db, row["run_id"], row["job_id"], None, history_entry(HistoryKind.COMMAND, row["verb"]),
                        f"{status} {result}".strip())


# a queued job whose every parent succeeded (or that has none), and no stage 1 holds: slot and pause
# reasons apply to it
_NOT_WAITING_FOR_OTHERS = ("held IS NULL AND (after_json = '[]' OR NOT EXISTS (SELECT 1 FROM json_each(jobs.after_json) AS d"
                           " JOIN jobs AS p ON p.id = d.value WHERE p.state != 'succeeded'))")


def _set_after(db: sqlite3.Connection, run_id: int, added: list[tuple[int, Mapping[str, Any]]]) -> None:
    """The parents of the jobs just added, as ids: their keys looked up in the run once all of its
    new jobs are in (a job may wait for one listed after it)."""
    waiting = [(job_id, job) for job_id, job in added if job.get("after_keys") or job.get("after_ids")]
    if not waiting:
        return
    by_key = {key: job_id for key, job_id in db.execute("SELECT key, id FROM jobs WHERE run_id=?", (run_id,))}
    for job_id, job in waiting:
        unknown = [k for k in job.get("after_keys", ()) if k not in by_key]
        if unknown:
            raise JournalError(f"job {job['key']} waits for {unknown[0]!r}, which run {run_id} does not hold")
        parents = sorted({*(by_key[k] for k in job.get("after_keys", ())), *job.get("after_ids", ())} - {job_id})
        db.execute("UPDATE jobs SET after_json=? WHERE id=?", (json.dumps(parents), job_id))


def _set_roles(db: sqlite3.Connection, added: list[tuple[int, Mapping[str, Any]]]) -> None:
    """The sweep roles of the jobs just added; a full job of a search is held until its stage 1 ends."""
    for job_id, job in added:
        role = job.get("sweep")
        if isinstance(role, SweepRole):
            held = role.search if role.stage is Stage.FULL else None
            db.execute("UPDATE jobs SET sweep_json=?, held=? WHERE id=?", (role.to_json(), held, job_id))


def _command_row(row: sqlite3.Row) -> CommandRow:
    """A row of ``commands``: its ``verb`` column holds the command's kind (the name it had when
    commands were verbs, so journals of either age read the same)."""
    return CommandRow(id=row["id"], run_id=row["run_id"], command=decode(row["verb"], row["job_id"], row["args_json"]),
                      status=row["status"], result=row["result"] or "", ts=row["ts"], handled=row["handled"])


def _connect(path: Path, timeout_s: float) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
    db.execute(f"PRAGMA journal_mode={filesystems.journal_mode(path)}")  # WAL's shared memory needs one host
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    _add_missing_columns(db)
    db.executescript(LATER_INDEXES)
    return db


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """Bring a journal written by an older LAT up to this schema: columns added since are created
    with their declared type and default, so upgrading never strands a running experiment."""
    wanted = sqlite3.connect(":memory:")
    wanted.executescript(SCHEMA)
    for (table,) in wanted.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for _, name, kind, notnull, default, _pk in wanted.execute(f"PRAGMA table_info({table})"):
            if name not in have:
                clause = f" DEFAULT {default}" if default is not None else ""
                clause += " NOT NULL" if notnull and default is not None else ""
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}{clause}")
    wanted.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, so concurrent writers serialise instead of failing mid-way. Inside
    another (:meth:`Store.batch`) it is a savepoint: its writes stay all-or-nothing and reach the
    journal with the enclosing transaction's one commit."""

    def __init__(self, db: sqlite3.Connection, check_wal: Callable[[], None]):
        self.db = db
        self.nested = False
        self._check_wal = check_wal

    def __enter__(self) -> sqlite3.Connection:
        self.nested = self.db.in_transaction
        self.db.execute("SAVEPOINT lat_tx" if self.nested else "BEGIN IMMEDIATE")
        if not self.nested:
            try:
                self._check_wal()  # with the write lock held: no other writer can start a new -wal meanwhile
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return self.db

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self.nested:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
            return
        if exc_type:
            self.db.execute("ROLLBACK TO lat_tx")
        self.db.execute("RELEASE lat_tx")


class EndFields(TypedDict, total=False):
    """Columns a job's state change may set with it; the diagnosis as its type (encoded here, the
    one writer of ``diagnosis_json``). An attempt's end takes its return code apart."""
    device: str | None
    started: float | None
    ended: float | None
    error: str | None
    attempts: int
    diagnosis: Diagnosis | None
    not_before: float
    fused_group: str | None
    last_step: int | None  # a requeued job's row: where its next attempt starts (engine/requeue.py)
    last_loss: float | None
    held: str | None  # the search whose stage 1 a job waits for (None: it no longer does)


class JobFields(EndFields, total=False):
    returncode: int | None


_JOB_FIELDS = JobFields.__optional_keys__


def _set_job_state(db: sqlite3.Connection, job_id: int, state: JobState, detail: str, fields: JobFields) -> None:
    unknown = set(fields) - _JOB_FIELDS
    if unknown:
        raise ValueError(f"unknown job fields {sorted(unknown)}")
    columns = _job_columns(fields)
    row = db.execute("SELECT run_id, state FROM jobs WHERE id=?", (job_id,)).fetchone()
    sets = ", ".join(f"{k}=?" for k in ["state", *columns])
    db.execute(f"UPDATE jobs SET {sets} WHERE id=?", (state, *columns.values(), job_id))
    _transition(db, row["run_id"], job_id, row["state"], state, detail)


def _job_columns(fields: JobFields) -> dict[str, object]:
    """The ``jobs`` columns and values for ``fields``."""
    columns: dict[str, object] = dict(fields)
    if "diagnosis" in columns:
        diagnosis = fields["diagnosis"]
        del columns["diagnosis"]
        columns["diagnosis_json"] = None if diagnosis is None else json.dumps(diagnosis.to_json())
    return columns


def _transition(db: sqlite3.Connection, run_id: int, job_id: int | None, old: str | None, new: str,
                detail: str) -> None:
    db.execute(
        "INSERT INTO transitions (ts, run_id, job_id, old_state, new_state, detail) VALUES (?,?,?,?,?,?)",
        (time.time(), run_id, job_id, old, new, detail),
    )


def _devices_json(devices: Iterable[Device | Mapping[str, Any]]) -> str:
    """Devices as the journal keeps them (a mapping is checked as a Device on the way in)."""
    return json.dumps([(d if isinstance(d, Device) else Device.from_json(d)).to_json() for d in devices])


def _new_id(cursor: sqlite3.Cursor) -> int:
    """The id SQLite gave the row ``cursor`` just inserted."""
    if cursor.lastrowid is None:
        raise JournalError("SQLite gave an inserted row no id")
    return cursor.lastrowid
