"""Admission, launch, cancel and settling of fused groups (plan ``fuse``; see
:mod:`lat_core.engine.fusion`), two parts of :class:`lat_core.engine.loop.Engine`:
:class:`GroupStarts` (which queued jobs join a group, and its launch) and :class:`FusedGroups` (a
group once started).

A group takes one slot on one device; each member has its own attempt row and is reaped, judged,
triaged and retried as a job of its own. Its process is shared, so a member is cancelled through
its cancel marker, never a signal, and nothing kills the process while another member still needs it.
"""
from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from lat_core.contract.devices import Device
from lat_core.contract.journal import Store
from lat_core.contract.run_secrets import JobSecrets
from lat_core.engine.admission import Admission
from lat_core.engine.backends import Backend
from lat_core.engine.faults import JOURNAL_ERRORS
from lat_core.engine.fusion import (GROUP_SIZE_LIMIT, MATE_SCAN, fuse_key_or_why, fuses_on, group_argv,
                                    jobs_see_no_gpu, smaller_limit)
from lat_core.engine.pack import pack_argv, pack_key
from lat_core.engine.requeue import restart_argv, waiting_step
from lat_core.engine.retries import backoff_hold
from lat_core.engine.state import EngineState
from lat_core.engine.warm import WarmStarts
from lat_core.contract.jobdir import AttemptFiles, ExitRecord, GroupRef, JobDir
from lat_core.errors import OutputPathError
from lat_core.monitor.usage import JobUsage
from lat_core.contract.rows import AttemptRow, JobRow, RunRow
from lat_core.contract.states import HistoryKind, JobState
from lat_core.contract.failure_classes import OOM_CLASSES
from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME

if TYPE_CHECKING:  # a group starts through the starts, which adopt through recovery, which settles groups
    from lat_core.engine.starts import Starts

GROUP_END_GRACE_S = 30.0  # a group process's own end after its last member left (frees its memory)
MemberAttempt = tuple[int, int, Path]  # a member's (attempt id, attempt number, exit record path)


class GroupStarts:
    """Which queued jobs join a job's fused group, and the group's start: one launch for all."""

    def __init__(self, state: EngineState, *, groups: FusedGroups, starts: Starts, warm: WarmStarts,
                 admission: Admission, secrets: JobSecrets, waits: Callable[[JobRow], bool]):
        self.store = state.store
        self._clock = state.clock
        self._state = state
        self._groups = groups
        self._waits = waits  # a job held for others (after:, a search's stage 1): it joins no group
        self._starts = starts
        self._warm = warm
        self._admission = admission
        self._job_secrets = secrets
        # (job id, attempts) -> (fuse key, why it has none, group limit)
        self._fuse_keys: dict[tuple[int, int], tuple[tuple | None, str | None, int]] = {}
        # (job id, attempts) -> (its group's process, its mates' job ids) where it saved to resume in a group
        self._saved_in_group: dict[tuple[int, int], tuple[int | str, tuple[int, ...]] | None] = {}
        # job id -> why a queued job that shares its fuse key did not join it (admission), for alone_reason
        self._mate_refused: dict[int, str] = {}

    def resume_hold(self, job: JobRow) -> str | None:
        """Why a member that saved to be resumed (its time limit's warning) waits: the warning reached
        its whole group, whose other members are still saving; resubmitted together they train in one
        group again, where the first one out would otherwise start alone. Bounded: the group's
        process ends once its members left (FusedGroups.group_ending)."""
        if not job.attempts:
            return None
        key = (job.id, job.attempts)
        if key not in self._saved_in_group:
            last = self.store.attempts(job.id)[-1]
            ref = AttemptFiles(last.exit_path).read_group_ref() if last.returncode == EXIT_SAVED_TO_RESUME else None
            self._saved_in_group[key] = (last.pid, ref.job_ids) if ref is not None and last.pid else None
        saved = self._saved_in_group[key]
        if saved is None:
            return None
        pid, mates = saved
        still = sorted(a.job_id for a in self.store.open_attempts(job.run_id)
                       if a.pid == pid and a.job_id in mates and a.job_id != job.id)
        if not still:
            return None
        return f"waiting for jobs {', '.join(map(str, still))} of its fused group to save too, to resume together"

    def _fuse_info(self, job: JobRow) -> tuple[tuple | None, str | None, int]:
        """(the job's fuse key, why it has none, the most members its group may have), read once per
        attempt (a remedy between attempts may change job.yaml; a group out of memory lowers the
        limit): admission asks for every queued job, and a job that starts alone says why from it.
        Under ``fuse: auto`` a job whose family and row width a group was not measured to win on
        has no key (lat_core.config.fuse_measured)."""
        if (job.id, job.attempts) not in self._fuse_keys:
            limit = JobDir(job.job_dir).read_group_limit()
            size = GROUP_SIZE_LIMIT if limit is None else min(limit.size, GROUP_SIZE_LIMIT)
            measured = self._state.plan_of(job.run_id).fuse == "auto"  # true: fuse whatever was measured
            key, why = fuse_key_or_why(job, measured) if size > 1 else (None, limit.why if limit else None)
            self._fuse_keys[(job.id, job.attempts)] = (key, why, size)
        return self._fuse_keys[(job.id, job.attempts)]

    def fuse_mates(self, run: RunRow, job: JobRow, device: Device, running: list[JobRow],
                   taken: set[int]) -> list[JobRow]:
        """Queued jobs after ``job`` that may join its group on ``device``: same fuse key, not held,
        and the group's summed expected memory still admitted; no more members than the smallest
        group limit among them (GROUP_SIZE_LIMIT, or less for a job whose group ran out of memory)."""
        if not fuses_on(self._state.plan_of(run.id), jobs_see_no_gpu(device)) \
                or not self._state.backend(run.id).runs_fused_groups:
            return []
        self._mate_refused.pop(job.id, None)  # an earlier pass's
        key, _, cap = self._fuse_info(job)
        if key is None:
            return []
        group, refused = [job], None
        for other in self.store.queued_jobs(run.id, limit=MATE_SCAN, after_seq=job.seq):
            if len(group) >= cap:
                break
            other_key, _, other_cap = self._fuse_info(other)
            if other.id in taken or device.id in other.avoid_devices or other_key != key or other_cap <= len(group):
                continue
            if self._warm.hold(other) or backoff_hold(other, self._clock()) is not None \
                    or self._waits(other) or self.resume_hold(other):
                continue
            blocker = self._admission.group_blocker([*group, other], device, running)
            if blocker is None:
                group.append(other)
                cap = min(cap, other_cap)
            elif refused is None:
                refused = f"job {other.id} shares its base, data and settings, but not in one group now: {blocker}"
        if len(group) == 1 and refused is not None:  # alone_reason says it, not "no queued job shares..."
            self._mate_refused[job.id] = refused
        return group[1:]

    def pack_mates(self, run: RunRow, job: JobRow, device: Device, taken: set[int]) -> list[JobRow]:
        """Queued jobs after ``job`` that share its warm pack (plan ``slurm.pack``, with ``warm_start``
        on): same interpreter, environment and suite (lat_core.engine.pack.pack_key), not held; at
        most ``pack - 1``. Slurm schedules the pack's resources, so no local admission is asked."""
        size = self._state.backend(run.id).pack_size
        if size < 2 or not self._state.plan_of(run.id).warm_start or (key := pack_key(job)) is None:
            return []
        pack: list[JobRow] = []
        for other in self.store.queued_jobs(run.id, limit=MATE_SCAN, after_seq=job.seq):
            if len(pack) >= size - 1:
                break
            if other.id in taken or device.id in other.avoid_devices or pack_key(other) != key:
                continue
            if backoff_hold(other, self._clock()) is not None or self._waits(other) or self.resume_hold(other):
                continue
            pack.append(other)
        return pack

    def alone_reason(self, run: RunRow, job: JobRow, device: Device) -> str | None:
        """Why ``job``, about to start alone, does not train in a fused group; None where the plan
        does not fuse on ``device`` (nothing to explain). A job that could fuse but has no mate
        says so too: "nothing is dropped silently" holds for a speed-up as for a tracker."""
        if not fuses_on(self._state.plan_of(run.id), jobs_see_no_gpu(device)):
            return None
        backend = self._state.backend(run.id)
        if not backend.runs_fused_groups:
            return f"trains alone: the {backend.name} backend runs every job in a process of its own"
        _, why, _ = self._fuse_info(job)  # a group limit of 1 after an OOM, or what keeps it out
        if why is not None:
            return f"trains alone: {why}"
        refused = self._mate_refused.pop(job.id, None)  # e.g. two slow-path Mamba members on an 80 GiB GPU
        if refused is not None:
            return f"trains alone: {refused}"
        return "trains alone: no queued job shares its base, data and settings now"

    def start(self, jobs: list[JobRow], device: Device, *, pack: bool = False) -> None:
        """Attempt rows, group refs and running states first, then one launch (a member whose lost
        attempt was found is taken over instead, as a job alone). Every one of ``jobs`` leaves the
        queue: the caller's queued rows of them are stale. ``pack``: the jobs are a warm pack
        (:meth:`pack_mates`), each trained in a process of its own forked from the pack's."""
        members: list[JobRow] = []
        attempts: list[MemberAttempt] = []
        for job in jobs:
            if self._starts.adopted(job, device.id):
                continue
            exit_path = JobDir(job.job_dir).attempt(job.attempts + 1).exit_path
            attempt_id, n = self.store.start_attempt(job.id, device.id, str(exit_path), started=self._clock())
            try:
                JobDir(job.job_dir).clear_cancel()  # an earlier attempt's cancel
            except (OSError, OutputPathError) as exc:  # its folder: it fails alone, the group goes on
                self._starts.failed(job, attempt_id, exc)
                continue
            members.append(job)
            attempts.append((attempt_id, n, exit_path))
        members, attempts, ref = self._write_group_refs(members, attempts, pack)
        if ref is None:  # every member failed alone
            return
        leader, (_, leader_n, _) = members[0], attempts[0]
        gid, ids = ref.group_id, ", ".join(str(j.id) for j in members)
        self.store.start_group(gid, leader.run_id, device.id, len(members), [j.id for j in members])
        try:
            env = {**self._job_secrets.unmask(leader.run_id, leader.env), **device.env,
                   "LAT_JOB_ID": str(leader.id), "LAT_ATTEMPT": str(leader_n), "LAT_SUITE": leader.suite}
            numbers = [n for _, n, _ in attempts]
            argv = pack_argv(members, numbers) if pack else group_argv(members, numbers)
            backend, job_dir, exit_path = self._state.job_backend(leader), Path(leader.job_dir), Path(ref.exit_path)
            if pack:  # a Slurm job of its own, which preloads and forks its members on its node
                launched = backend.launch(argv, env, job_dir, exit_path, tuple(leader.env), pack=len(members))
            else:  # forked from the preloaded process as a job alone would be (its imports are the group's)
                launched = (self._warm.launch(leader, argv, env, job_dir, exit_path)
                            or backend.launch(argv, env, job_dir, exit_path, tuple(leader.env)))
        except JOURNAL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever stops this launch fails its members alone
            for job, (attempt_id, _, _) in zip(members, attempts):
                self._starts.failed(job, attempt_id, exc)
            return
        if launched.popen is not None:
            self._groups.watch(launched.popen)
        for job, (attempt_id, _, _) in zip(members, attempts):
            # the same words for every member: the progress stream says them once per group
            if pack:
                self.store.add_transition(job.run_id, job.id, HistoryKind.WARM_START,
                                          f"pack {gid}: jobs {ids} share one Slurm job ({launched.pid}; "
                                          "warm start: torch & co. imported once)")
            else:
                self.store.add_transition(job.run_id, job.id, HistoryKind.FUSED,
                                          f"group {gid}: one process for jobs {ids} on {device.id}"
                                          f"{backend.fused_launch_note(launched.pid)}")
            self._starts.launched(job, attempt_id, launched)

    def _write_group_refs(self, members: list[JobRow], attempts: list[MemberAttempt], pack: bool = False
                          ) -> tuple[list[JobRow], list[MemberAttempt], GroupRef | None]:
        """(members, attempts, ref) once every member's folder holds the group's ref; a member whose
        folder does not take it fails alone (its launch failed, naming the file) and the refs of the
        rest are written again without it (their group's ids, and its leader, changed)."""
        while members:
            leader_n = attempts[0][1]
            group_exit = JobDir(members[0].job_dir).group_attempt(leader_n).exit_path
            ref = GroupRef(str(group_exit), tuple(j.id for j in members), pack)
            refused: dict[int, OSError] = {}
            for k, (_, _, exit_path) in enumerate(attempts):
                try:
                    AttemptFiles(exit_path).write_group_ref(ref)
                except OSError as exc:
                    refused[k] = exc
            if not refused:
                return members, attempts, ref
            for k, error in refused.items():
                self._starts.failed(members[k], attempts[k][0], error)
            members = [j for k, j in enumerate(members) if k not in refused]
            attempts = [a for k, a in enumerate(attempts) if k not in refused]
        return [], [], None


class FusedGroups:
    """A fused group once started: its members' cancel (a marker: the process is shared), the kill
    of its process once no member needs it, its members' settling, its usage and peaks recorded for
    the group, and its slot counted once."""

    def __init__(self, store: Store):
        self.store = store
        self._group_popens: list[subprocess.Popen[bytes]] = []  # runners of fused groups, polled until they end
        self._groups_killed: set[int] = set()  # last members' attempt ids whose group outlived them

    def watch(self, popen: subprocess.Popen[bytes]) -> None:
        """A group's runner this engine launched: reaped once it ends (see :meth:`poll`)."""
        self._group_popens.append(popen)

    def record_usage(self, usage: dict[int, JobUsage]) -> dict[int, JobUsage]:
        """A fused group's sampled usage (its members' trees are its one process tree) recorded
        for the group, with how many members were in it; returns the usage of jobs alone."""
        groups = self.store.groups_of(usage)
        members: dict[str, list[int]] = {}
        for job_id, group in groups.items():
            members.setdefault(group, []).append(job_id)
        for group, job_ids in members.items():
            tree = usage[job_ids[0]]
            self.store.record_group_usage(group, len(job_ids), tree.rss_bytes, tree.gpu_bytes)
        return {job_id: u for job_id, u in usage.items() if job_id not in groups}

    def remember_peak(self, job: JobRow) -> None:
        """A member that succeeded: its group's peak with all its members in, as what a group of
        that size holding this config needs (lat_core.engine.member_cost fits from these)."""
        group = self.store.fused_group(job.fused_group) if job.fused_group else None
        if group is not None and (group.full_gpu or group.full_rss):
            self.store.record_group_peak(job.profile_key, group.members, group.full_gpu or 0, group.full_rss or 0)

    def poll(self) -> None:
        """Reap the runners of our group launches: the last member's exit record is written before
        the group's process ends, so a member's attempt cannot be the one that waits for it."""
        self._group_popens[:] = [p for p in self._group_popens if p.poll() is None]

    # ------------------------------------------------------------------ cancel, kill, settle
    def cancel_member(self, job: JobRow, attempt: AttemptRow) -> bool:
        """Cancel a fused member through its marker (the group leaves it out before its next
        micro-batch); False for an attempt of its own."""
        if AttemptFiles(attempt.exit_path).read_group_ref() is None:
            return False
        JobDir(job.job_dir).request_cancel(time.time())
        return True

    def may_kill(self, attempt: AttemptRow) -> bool:
        """Whether a cancelled attempt's process may be killed after the grace: always for a process
        of its own; a fused group's only when every other open member of it is being cancelled too."""
        if AttemptFiles(attempt.exit_path).read_group_ref() is None:
            return True
        others = [a for a in self.store.open_attempts(self.store.job(attempt.job_id).run_id)
                  if a.pid == attempt.pid and a.id != attempt.id]
        return all(a.cancel_at is not None for a in others)

    def settle_member(self, attempt: AttemptRow, backend: Backend) -> ExitRecord | None:
        """A fused member without an exit record whose group process is gone: its exit record,
        from the group's (the group's tree is stopped first where its runner vanished), with why."""
        member = AttemptFiles(attempt.exit_path)
        ref = member.read_group_ref()
        if ref is None:
            return None
        runner = AttemptFiles(ref.exit_path)
        group = runner.read_exit()
        if group is None and backend.reaps_process_tree and attempt.pid:  # (asked only once its pid is dead)
            backend.stop_vanished(attempt.pid, attempt.pid_start, runner.exit_path)
            group = runner.read_exit()
        rc = group.returncode if group is not None and group.returncode != 0 else None
        code = "unknown" if group is None or group.returncode is None else group.returncode
        why = (f"the fused group's process ended (exit {code}) "
               "before this member left the group")
        record = ExitRecord(rc, pid=attempt.pid, ended=time.time(), fused_group=True, why=why,
                            # its OOM-kill count and containment: for triage
                            oom_kills=group.oom_kills if group else None, containment=group.containment if group else None)
        member.write_exit(record)
        return replace(record, problem=why)

    def group_ending(self, attempt: AttemptRow, backend: Backend) -> bool:
        """A member that left its group, as the last of the group's open attempts, while the group's
        process still runs (it ends after its last member leaves): True, the member stays open so
        the slot frees once the group's whole tree is gone, never while it may still hold memory.
        A group process still there GROUP_END_GRACE_S after its last member left is killed; a
        runner gone without its exit record has what is left of its tree stopped."""
        ref = AttemptFiles(attempt.exit_path).read_group_ref()
        if ref is None or not attempt.pid or AttemptFiles(ref.exit_path).read_exit() is not None:
            return False
        if any(a.pid == attempt.pid and a.id != attempt.id
               for a in self.store.open_attempts(self.store.job(attempt.job_id).run_id)):
            return False  # a member still in the group: the process goes on for it
        if not backend.is_alive(attempt.pid, attempt.pid_start):
            if backend.reaps_process_tree:
                backend.stop_vanished(attempt.pid, attempt.pid_start, Path(ref.exit_path))
            return False
        if time.time() >= _written_at(Path(attempt.exit_path)) + GROUP_END_GRACE_S:
            backend.signal(attempt.pid, signal.SIGKILL)
            if attempt.id not in self._groups_killed:
                self._groups_killed.add(attempt.id)
                job = self.store.job(attempt.job_id)
                self.store.add_transition(job.run_id, job.id, HistoryKind.FUSED, f"the group's process was still running "
                                          f"{GROUP_END_GRACE_S:g} s after its last member left: killed")
        return True

    def split_after_oom(self, attempt: AttemptRow) -> bool:
        """A member of a group of N (N >= 2) that failed out of memory: requeued from the start to
        train in groups of at most N // 2 (1: alone, its own process); True when requeued. Each
        member that failed out of memory is requeued by its own failure; the others are untouched.
        The plan's ``on_oom`` retries and the remedies apply once the job ran alone."""
        job = self.store.job(attempt.job_id)
        ref = AttemptFiles(attempt.exit_path).read_group_ref()
        klass = job.diagnosis.cls if job.diagnosis else None
        if ref is None or ref.pack or len(ref.job_ids) < 2 or klass not in OOM_CLASSES:
            return False  # a pack's member ran in a process of its own: its remedies apply as alone
        limit = smaller_limit(JobDir(job.job_dir), len(ref.job_ids), klass)
        JobDir(job.job_dir).write_group_limit(limit)
        argv = restart_argv(job.argv, False, "fresh")
        self.store.set_job_argv(job.id, argv)
        self.store.set_job_state(job.id, JobState.QUEUED, f"{limit.why}: {requeued_to(limit.size)}", ended=None,
                                 returncode=None, error=None, not_before=0, last_step=waiting_step(argv, job.job_dir),
                                 last_loss=None)
        return True

    def busy_slots(self, on_host: list[JobRow], busy: dict[str, int]) -> dict[str, int]:
        """``busy`` (one slot per running job) with each fused group counted once: open attempts
        that share a process on a device, and whose group refs say so (a pid shared by chance, a
        stale attempt's reused pid, never frees a slot)."""
        running = {j.id: j for j in on_host}
        by_process: dict[tuple[str, int], list[AttemptRow]] = {}
        for run_id in {j.run_id for j in on_host}:
            for a in self.store.open_attempts(run_id):
                job = running.get(a.job_id)
                if job is not None and job.device and a.pid:
                    by_process.setdefault((job.device, a.pid), []).append(a)
        for (device, _), attempts in by_process.items():
            members = [a for a in attempts if AttemptFiles(a.exit_path).read_group_ref() is not None] \
                if len(attempts) > 1 else []
            if members:
                busy[device] -= len(members) - 1
        return busy



def _written_at(path: Path) -> float:
    """When the file was written (wall clock), 0 where it cannot be read."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def requeued_to(size: int) -> str:
    return "requeued to run alone" if size == 1 else f"requeued to train in groups of at most {size}"
