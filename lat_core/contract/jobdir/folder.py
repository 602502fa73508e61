"""A job's folder: every file in it is reached through :class:`JobDir` (names in ``names``).

Files are read only when asked, and reading never raises on their content: it is input from
processes that may have crashed half-way, or from another version of LAT.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from lat_core.contract.jobdir import names
from lat_core.contract.jobdir.attempt import AttemptFiles
from lat_core.contract.jobdir.checkpoints import checkpoint_dirs, checkpoint_is_complete
from lat_core.contract.jobdir.event_reader import CHUNK_BYTES, EventsRead, EventTail, read_events
from lat_core.contract.jobdir.event_writer import EventWriter
from lat_core.contract.jobdir.events import AnyEvent, EarlyStop, Finished, Memory
from lat_core.contract.jobdir.json_files import UNREADABLE, read_small_json, write_json
from lat_core.contract.jobdir.provenance import SweepPoint, SweepRowsError, made_from
from lat_core.contract.jobdir.records import ExitRecord, GroupLimit, PeakUsage
from lat_core.safe_files import ensure_folder, open_append, remove_files, replace_file


PROVENANCE_BYTES = 1024 * 1024  # overrides.json lists every value set, a plan's datasets mapping too
ENV_RECORD_BYTES = 16 * 1024 * 1024  # env.json: every installed package and a git diff per invocation
TRACKER_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")   # what W&B and SwanLab take as a run id


class JobDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"JobDir({str(self.path)!r})"

    # ------------------------------------------------------------------ paths
    @property
    def job_yaml(self) -> Path:
        return self.path / names.JOB_YAML

    @property
    def events_path(self) -> Path:
        return self.path / names.EVENTS

    @property
    def train_log(self) -> Path:
        return self.path / names.TRAIN_LOG

    @property
    def runner_dir(self) -> Path:
        return self.path / names.RUNNER_DIR

    # ------------------------------------------------------------------ checkpoints (THE rule)
    def checkpoint_dirs(self) -> list[tuple[int, Path]]:
        """(step, folder) of every folder named like a checkpoint, complete or not, oldest first."""
        return checkpoint_dirs(self.path)

    def resumable_checkpoints(self) -> list[tuple[int, Path]]:
        """(step, folder) of the complete checkpoints, oldest first: the ones ``--resume`` takes."""
        return [(step, p) for step, p in self.checkpoint_dirs() if checkpoint_is_complete(p)]

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        """The newest complete checkpoint, or None when the job must start from the beginning."""
        found = self.resumable_checkpoints()
        return found[-1] if found else None

    def incomplete_checkpoints(self) -> list[Path]:
        """Checkpoint folders whose save did not finish (a crash mid-save): never resumed from."""
        return [p for _, p in self.checkpoint_dirs() if not checkpoint_is_complete(p)]

    # ------------------------------------------------------------------ the trainer's record (lat-tui rerun)
    @property
    def env_record_path(self) -> Path:
        return self.path / names.ENV_RECORD

    def env_record(self) -> dict[str, Any] | None:
        """env.json as the trainer wrote it (lat_core.train.record); None when missing, unreadable,
        too large or not a JSON object (a crash half-way, a hand edit)."""
        record = read_small_json(self.env_record_path, ENV_RECORD_BYTES)
        return record if isinstance(record, dict) else None

    def write_env_record(self, record: dict[str, Any]) -> None:
        """env.json replaced whole, inside the job's real folder (never through a planted symlink);
        indented, as people read it."""
        replace_file(self.env_record_path, json.dumps(record, indent=1).encode(), job_dir=self.path)

    # ------------------------------------------------------------------ the tracker run resumes continue
    def tracker_run_id(self) -> str | None:
        """The id of the tracker run the job's resumes continue; None when it has none (or the file
        is unreadable, or holds no valid id: the job then starts a new run)."""
        record = read_small_json(self.path / names.TRACKER_RUN)
        run_id = record.get("id") if isinstance(record, dict) else None
        return run_id if isinstance(run_id, str) and TRACKER_RUN_ID.match(run_id) else None

    def write_tracker_run_id(self, run_id: str) -> None:
        """Keep ``run_id`` as the job's tracker run (replaced whole, inside the job's real folder)."""
        if not TRACKER_RUN_ID.match(run_id):
            raise ValueError(f"not a tracker run id: {run_id!r}")
        write_json(self.path / names.TRACKER_RUN, {"id": run_id})

    def requeue_start(self, asked: str | None) -> tuple[str, str]:
        """How a failed or cancelled job requeued with the others starts: ``(start, what it got)``.
        ``fresh`` when asked, else it resumes from its newest complete checkpoint, or starts fresh
        when it left none (``--resume`` on a folder without one would fail the job at once)."""
        found = self.latest_checkpoint() if asked != "fresh" else None
        if found:
            return "resume", f"resume from {found[1].name}"
        return "fresh", "fresh (asked)" if asked == "fresh" else "fresh (no checkpoint)"

    # ------------------------------------------------------------------ events
    def event_writer(self) -> EventWriter:
        return EventWriter(self.events_path)

    def read_events(self, last_bytes: int | None = None) -> EventsRead:
        """The valid events of events.jsonl (or of its last ``last_bytes``), and what was skipped."""
        return read_events(self.events_path, last_bytes)

    def event_tail(self) -> EventTail:
        """A reader of the events appended from now on, starting near the end of the file."""
        return EventTail.near_end(self.events_path)

    def recent_events(self) -> tuple[AnyEvent, ...]:
        """The valid events among the file's last 64 KiB: a cheap look at how the job ends."""
        return self.read_events(CHUNK_BYTES).events

    def memory_event_peak(self) -> int:
        """The trainer's own peak GPU memory (torch's allocator) from its last ``memory`` event."""
        peaks = [e.peak_gpu_bytes for e in self.recent_events() if isinstance(e, Memory)]
        return (peaks[-1] or 0) if peaks else 0

    def has_finished(self) -> bool:
        """The trainer wrote its ``finished`` event among the last few (it ends a succeeded job's
        file; an older success followed by a rerun's events does not count)."""
        return any(isinstance(e, Finished) for e in self.recent_events()[-5:])

    def early_stop(self) -> EarlyStop | None:
        """How the job's last ``finished`` event says it stopped early (train.early_stopping), or
        None: it ran to max_steps, or has not finished."""
        finished = [e for e in self.recent_events() if isinstance(e, Finished)]
        return finished[-1].stopped_early if finished else None

    def finished_since(self, since: float) -> float | None:
        """When the job last wrote ``finished`` at or after ``since``. A finish ends its attempt's
        events, so the end of the file is where to look (a launch never reads a long file whole)."""
        times = [e.t for e in self.recent_events() if isinstance(e, Finished) and e.t and e.t >= since]
        return max(times) if times else None

    # ------------------------------------------------------------------ attempts
    def attempt(self, n: int) -> AttemptFiles:
        """Attempt ``n``'s exit record, pid file and group ref."""
        return AttemptFiles(self.runner_dir / names.attempt_exit(n))

    def group_attempt(self, n: int) -> AttemptFiles:
        """The runner's records of a fused group whose first member is this job, on its attempt ``n``
        (the group's own output lines go to this job's train.log besides its own)."""
        return AttemptFiles(self.runner_dir / names.group_exit(n))

    def attempts_on_disk(self) -> list[AttemptFiles]:
        """Every attempt the folder knows of (an exit record, a runner's pid file, or a fused member's
        group ref, written before its group launched), oldest first; one listing of the folder."""
        try:
            entries = os.listdir(self.runner_dir)
        except OSError:
            return []
        found = set()
        for entry in entries:
            match = names.ATTEMPT_EXIT.match(entry.removesuffix(names.PID_SUFFIX).removesuffix(names.GROUP_REF_SUFFIX))
            if match:
                found.add(int(match.group(1)))
        return [self.attempt(n) for n in sorted(found)]

    def latest_exit_record(self) -> ExitRecord | None:
        """The exit record of the highest-numbered attempt that has one."""
        for attempt in reversed(self.attempts_on_disk()):
            if (record := attempt.read_exit()) is not None:
                return record
        return None

    # ------------------------------------------------------------------ a fused member's cancel
    @property
    def cancel_marker(self) -> Path:
        """A job trained in a fused group (lat_core/train/fused) is cancelled by this file: the
        group's process is shared, so a signal would stop every member; the group leaves out a
        member whose marker exists before its next micro-batch."""
        return self.runner_dir / names.CANCEL_MARKER

    def request_cancel(self, when: float) -> None:
        replace_file(self.cancel_marker, f"{when}\n".encode())

    def cancel_requested(self) -> bool:
        return self.cancel_marker.exists()

    def clear_cancel(self) -> None:
        """An earlier attempt's cancel, removed before a new attempt starts."""
        remove_files(self.runner_dir, (names.CANCEL_MARKER,), job_dir=self.path)

    def append_log_line(self, line: str) -> None:
        """A line of LAT's own at the end of train.log (never through a symlink planted there)."""
        with os.fdopen(open_append(self.train_log, job_dir=self.path), "a") as log:
            log.write(line + "\n")

    def ensure_runner_dir(self) -> None:
        ensure_folder(self.runner_dir, self.path)

    # ------------------------------------------------------------------ what the front end planned
    def sweep_point(self) -> SweepPoint | None:
        """The sweep point the job trains, as its overrides.json records it; None for a job of no
        sweep (or no such file: a folder made by hand). SweepRowsError, naming the file, for one
        that cannot say it (too large, not JSON, not provenance rows, a broken sweep row)."""
        rows = read_small_json(self.path / names.OVERRIDES, PROVENANCE_BYTES)
        try:
            if rows is UNREADABLE:
                raise SweepRowsError(f"not JSON, or over {PROVENANCE_BYTES // (1024 * 1024)} MiB")
            return SweepPoint.from_rows(rows)
        except SweepRowsError as exc:
            raise SweepRowsError(f"{names.OVERRIDES}: {exc}") from None

    def made_from(self) -> Path | None:
        """The experiment YAML the front end planned the job from, as its overrides.json records it;
        None for a job made otherwise (a trainer run by hand) or a file that cannot say it."""
        config = made_from(read_small_json(self.path / names.OVERRIDES, PROVENANCE_BYTES))
        return Path(config) if config else None

    # ------------------------------------------------------------------ the engine's records
    def write_peak_usage(self, usage: PeakUsage) -> None:
        write_json(self.runner_dir / names.PEAK_USAGE, usage.to_json())

    def read_peak_usage(self) -> PeakUsage | None:
        """None when the engine never wrote one (a trainer run by hand) or it is not this shape."""
        return PeakUsage.from_json(read_small_json(self.runner_dir / names.PEAK_USAGE))

    def write_pruned(self, reason: str) -> None:
        """Why the plan's sweep pruned the job, for the results tables (the journal has it too)."""
        self.ensure_runner_dir()
        write_json(self.runner_dir / names.PRUNED, {"reason": reason})

    def pruned_reason(self) -> str | None:
        """Why the sweep pruned the job; None when it did not (or the record is not this shape)."""
        raw = read_small_json(self.runner_dir / names.PRUNED)
        return raw["reason"] if isinstance(raw, dict) and isinstance(raw.get("reason"), str) else None

    def clear_pruned(self) -> None:
        """A pruned job requeued by hand runs, and its record no longer says it was pruned."""
        remove_files(self.runner_dir, (names.PRUNED,), job_dir=self.path)

    def write_group_limit(self, limit: GroupLimit) -> None:
        write_json(self.runner_dir / names.GROUP_LIMIT, limit.to_json())

    def read_group_limit(self) -> GroupLimit | None:
        """The job's limit; None: no limit (no file). A file that cannot be read or parsed (a crash
        half-way, a hand edit) and an older engine's mark both read as running alone: the safe side
        for a job whose group ran out of memory, and never an engine error."""
        path = self.runner_dir / names.GROUP_LIMIT
        if not path.exists():
            return self._old_runs_alone_mark()
        return GroupLimit.from_json(read_small_json(path)) or GroupLimit(1, f"{path} is not a group limit: runs alone")

    def _old_runs_alone_mark(self) -> GroupLimit | None:
        """An older engine's mark (one line, why): the job runs alone; read as a limit of 1."""
        try:
            why = (self.runner_dir / names.OLD_RUNS_ALONE).read_text().strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            why = f"unreadable ({type(exc).__name__})"
        return GroupLimit(1, why or "an older engine's mark")
