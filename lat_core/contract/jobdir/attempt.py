"""One attempt's records in its job's ``.lat`` folder, all named after its exit record: the exit
record itself, the runner's pid file beside it and, for a fused member, its group ref.

The journal keeps an attempt's exit record's path; :class:`AttemptFiles` takes that path (or
``JobDir.attempt(n)`` makes it), and every read and write of these records goes through it.
"""

from __future__ import annotations

from pathlib import Path

from lat_core.contract.jobdir.json_files import read_small_json, write_json
from lat_core.contract.jobdir.names import ATTEMPT_EXIT, EXIT_SUFFIX, GROUP_REF_SUFFIX, PID_SUFFIX
from lat_core.contract.jobdir.records import ExitRecord, GroupRef, PidRecord
from lat_core.safe_files import remove_files


class AttemptFiles:
    def __init__(self, exit_path: str | Path) -> None:
        self.exit_path = Path(exit_path)

    def __repr__(self) -> str:
        return f"AttemptFiles({str(self.exit_path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AttemptFiles) and other.exit_path == self.exit_path

    def __hash__(self) -> int:
        return hash(self.exit_path)

    @property
    def pid_path(self) -> Path:
        return Path(f"{self.exit_path}{PID_SUFFIX}")

    @property
    def group_ref_path(self) -> Path:
        return Path(f"{self.exit_path}{GROUP_REF_SUFFIX}")

    def instead_of_exit(self, suffix: str) -> Path:
        """The attempt's file that a scheduler keeps in place of the exit record's suffix
        (``attempt-3.sbatch``, ``attempt-3.array``)."""
        return self.exit_path.with_name(self.exit_path.name.removesuffix(EXIT_SUFFIX) + suffix)

    @property
    def number(self) -> int | None:
        """The attempt's number (``attempt-N``); None for a group's own record."""
        match = ATTEMPT_EXIT.match(self.exit_path.name)
        return int(match.group(1)) if match else None

    @property
    def name(self) -> str:
        """``attempt-N`` (what the job's log and the journal call it)."""
        return self.exit_path.name.removesuffix(".exit.json")

    # -------------------------------------------------------------------- exit record
    def read_exit(self) -> ExitRecord | None:
        """None while there is no record; one that is unusable reads with its ``problem``."""
        raw = read_small_json(self.exit_path)
        return None if raw is None else ExitRecord.from_json(raw)

    def write_exit(self, record: ExitRecord) -> None:
        """On disk before it is renamed into place, inside the job's real folder: written once
        the attempt's whole process tree is gone."""
        write_json(self.exit_path, record.to_json(), durable=True)

    # -------------------------------------------------------------------- the runner's pid file
    def read_pid(self) -> PidRecord | None:
        return PidRecord.from_json(read_small_json(self.pid_path))

    def write_pid(self, record: PidRecord) -> None:
        write_json(self.pid_path, record.to_json(), durable=True)

    def clear_runner_files(self, job_dir: Path) -> None:
        """A relaunch's slate: an earlier run of this attempt's exit record and pid file removed."""
        remove_files(self.exit_path.parent, (self.exit_path.name, self.pid_path.name), job_dir=job_dir)

    # -------------------------------------------------------------------- a fused member's group
    def read_group_ref(self) -> GroupRef | None:
        """None for an attempt of its own (no file) or an unreadable file (then it is treated as one)."""
        return GroupRef.from_json(read_small_json(self.group_ref_path))

    def write_group_ref(self, ref: GroupRef) -> None:
        write_json(self.group_ref_path, ref.to_json())

    def runner(self) -> AttemptFiles:
        """The files of the runner that runs this attempt: its own, or a fused member's group's (a
        member has no runner of its own)."""
        ref = self.read_group_ref()
        return AttemptFiles(ref.exit_path) if ref is not None else self
