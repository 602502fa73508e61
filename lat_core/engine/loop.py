"""The scheduler loop: countdown, admission into free slots, reaping, commands.

No round barrier: whenever a slot frees, the next queued job (plan order) takes it at once, and a
failed job never stops the others. The engine is the only writer of job state; it reads commands
that front ends append to the journal. ``python -m lat_core.engine --state-dir DIR`` runs it as its
own detached process (see :mod:`lat_core.front.service`), holding a lock so two engines never share a
state directory.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from lat_core.contract.devices import Device
from lat_core.engine.retries import backoff_hold
from lat_core.engine.admission import Admission, AdmissionPolicy
from lat_core.engine.backends import Backend
from lat_core.engine.breaker import Breaker
from lat_core.engine.commands import Commands
from lat_core.engine.dependencies import Dependencies
from lat_core.engine.halving import Halving
from lat_core.engine.promotion import Promotion
from lat_core.engine.backends.local import LocalBackend
from lat_core.contract.jobdir import AttemptFiles, PidRecord
from lat_core.engine.launch import Launched, launch
from lat_core.monitor.gpu import GpuProbe, GpuSnapshot
from lat_core.monitor.usage import job_usage
from lat_core.engine.mps import RunMps
from lat_core.engine.placement import free_slots, merge, placements, slots_taken, slots_used
from lat_core.engine.notices import RunNotices
from lat_core.engine.faults import EngineErrors, engine_must_stop, journal_locked
from lat_core.engine.groups import FusedGroups, GroupStarts
from lat_core.engine.job_faults import JobFaults
from lat_core.engine.progress import Progress
from lat_core.engine.recovery import Recovery
from lat_core.engine.starts import Batch, Starts
from lat_core.engine.state import EngineState
from lat_core.contract.states import HistoryKind, JobState, RunState
from lat_core.contract.journal import JobRow, RunRow, Store
from lat_core.contract.rows import AttemptRow
from lat_core.engine.warm import WarmStarts
from lat_core.contract.run_secrets import JobSecrets
from lat_core.errors import JournalError

SAMPLE_EVERY_S = 2.0
LaunchFn = Callable[[list[str], dict[str, str], Path, Path, tuple[str, ...]], Launched]


class Engine:
    """The engine's loop over its parts: each part takes the state they share (:class:`EngineState`)
    and the parts it calls, so the order below is the order they depend on each other."""

    def __init__(self, store: Store, *, launch_fn: LaunchFn = launch, backend: Backend | None = None,
                 clock: Callable[[], float] = time.time, secrets: dict[str, str] | None = None,
                 gpu_probe: GpuProbe | None = None, sample_every_s: float = SAMPLE_EVERY_S,
                 policy: AdmissionPolicy | None = None):
        self.store = store
        self._clock = clock
        self._state = state = EngineState(store, clock, backend or LocalBackend(launch_fn))
        self._secrets = dict(os.environ if secrets is None else secrets)
        self._job_secrets = JobSecrets(Path(store.path).parent, self._secrets)
        self._notices = RunNotices(store, self._secrets, secrets_of=self._job_secrets.of)
        self._gpu_probe = gpu_probe or GpuProbe()
        self._admission = Admission(store, self._gpu_probe, policy=policy, clock=clock)
        self._sample_every_s = sample_every_s
        self._last_sample = 0.0
        # warm start forks jobs from a preloaded process: only where jobs really launch as processes
        self._warm = WarmStarts(store, allowed=backend is None and launch_fn is launch, plan_of=state.plan_of,
                                backend_of=state.backend, clock=clock)
        self._mps = RunMps(state)
        self._groups = FusedGroups(store)
        self._faults = JobFaults(state, self._groups)
        self._errors = EngineErrors(store, clock, on_disk_full=self._faults.disk_full)
        self._progress = Progress(store)
        self._breaker = Breaker(state, self._notices)
        self._recovery = Recovery(state, groups=self._groups, faults=self._faults, errors=self._errors,
                                  progress=self._progress, notices=self._notices, breaker=self._breaker)
        self._starts = Starts(state, recovery=self._recovery, faults=self._faults, warm=self._warm,
                              secrets=self._job_secrets, mps=self._mps)
        self._dependencies = Dependencies(state)
        self._promotion = Promotion(state)
        self._halving = Halving(state, stop=self.stop_pruned)
        self._group_starts = GroupStarts(state, groups=self._groups, starts=self._starts, warm=self._warm,
                                         admission=self._admission, secrets=self._job_secrets, waits=self._waits)
        self._commands = Commands(self)

    def now(self) -> float:
        return self._clock()

    # ------------------------------------------------------------------ loop
    def tick(self) -> bool:
        """One pass over every active run; True while any run is still active.

        Commands to ended runs (requeue, add jobs) are applied first: they may make a run active."""
        self.store.check_wal()  # an idle engine notices a lost -wal too, not only at its next write
        for run_id in self.store.runs_with_pending_commands():
            self._handle_commands(self.store.run(run_id))
            self._errors.retry_now(run_id)  # a command (cancel, ...) may be what the failing run needed
        self._sample_usage()  # one reading for every active run's jobs (the device ledger)
        for run in self.store.active_runs():
            if self._errors.due(run.id):
                with self._errors.guard(run.id):
                    self._tick_run(run)
        active = bool(self.store.active_run_ids())
        if not active:
            self.close()
        return active

    def close(self) -> None:
        """Stop what the engine started for its runs (the warm-start process); jobs run on. Notices
        still being sent are waited for."""
        self._warm.close()
        self._notices.flush()

    def run(self, poll_interval: float = 0.5, on_tick=None) -> None:
        """Tick until no run is active. A tick that fails outside any run's guard (the journal
        itself) is reported on stderr (the engine's log) and retried with backoff: the engine never
        dies of it; each run's own failures are recorded in its history (:class:`EngineErrors`)."""
        failures = 0
        while True:
            try:
                active = self.tick()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the engine outlives any failing tick
                if journal_locked(exc) or engine_must_stop(exc):
                    raise  # waited out / stopped on, with one line in engine.log, by the engine's process
                failures += 1
                traceback.print_exc(file=sys.stderr)
                active = True
            if on_tick:
                on_tick()
            if not active:
                return
            time.sleep(poll_interval * min(2 ** failures, 60))

    def _tick_run(self, run: RunRow) -> None:
        self._handle_commands(run)
        run = self.store.run(run.id)
        self._recovery.reap(run)
        self._recovery.settle_orphans(run)
        self._read_progress(run)
        if run.state is RunState.COUNTDOWN and self._clock() >= run.countdown_until:
            self.store.set_run_state(run.id, RunState.RUNNING, "countdown over")
            run = self.store.run(run.id)
        if run.state in (RunState.COUNTDOWN, RunState.RUNNING):
            self._refuse_damaged_plan(run)
            self._warm.prepare(run)
        if run.state is RunState.RUNNING:
            self._notices.run_started(run)
            self._dependencies.settle(run)  # before admission: it passes the jobs still waiting by
            self._promotion.settle(run)
            self._halving.settle(run)
            self._admit(self.store.run(run.id))  # as reaping left it: a full disk pauses admission
        self._finish_if_drained(run)

    def _refuse_damaged_plan(self, run: RunRow) -> None:
        """Nothing starts on settings guessed from a damaged saved plan: the run's tick fails with
        that one reason in its history; its running jobs are still reaped, and cancelling it works."""
        if run.plan.problem:
            raise JournalError(f"run {run.id}'s saved plan is damaged: {run.plan.problem}")

    def _finish_if_drained(self, run: RunRow) -> None:
        if not self.store.has_unfinished_jobs(run.id) and not self.store.open_attempts(run.id):
            counts = self.store.job_counts(run.id)
            succeeded, pruned = counts.get(JobState.SUCCEEDED, 0), counts.get(JobState.PRUNED, 0)
            final = RunState.CANCELLED if run.state is RunState.CANCELLING else RunState.FINISHED
            said = f"{succeeded} succeeded" + (f", {pruned} pruned by the sweep" if pruned else "")
            self.store.set_run_state(run.id, final, f"{said}, {sum(counts.values()) - succeeded - pruned} not")
            self._notices.run_finished(self.store.run(run.id))
            self._mps.stop(run.id)

    # ------------------------------------------------------------------ admission
    def _admit(self, run: RunRow) -> None:
        """Plan order, no barrier: each queued job takes the freest device that has a slot and the
        memory it is expected to need; a job that waits for memory does not block smaller ones."""
        if not self.store.queued_jobs(run.id, limit=1):
            return
        if run.paused:  # every queued job says why it waits, in one statement
            self.store.set_waiting_after(run.id, 0, self.store.pause_reason(run.id))
            return
        self._warm.begin_pass()
        on_host = self._running_on_host(run)
        running, busy = list(on_host), self._groups.busy_slots(on_host, slots_used(on_host))
        no_slot = f"no free slot on {'/'.join(d.id for d in run.devices)}"
        if not free_slots(run.devices, busy):
            self.store.set_waiting_after(run.id, 0, no_slot)  # none could start: none is read
            return
        local = self._state.backend(run.id).samples_local_processes
        self._admission.begin(run.devices if local else None,
                              min_free_gb=self._state.plan_of(run.id).min_free_gb)
        batch: Batch | None = [] if self._submits_arrays(run.id) else None
        taken: set[int] = set()  # started this pass as members of a fused group
        for job in self.store.iter_queued(run.id):
            if job.id in taken or self._waits(job):
                continue
            if (hold := self._warm.hold(job) or backoff_hold(job, self._clock())
                    or self._group_starts.resume_hold(job)) is not None:
                self._set_waiting(job, hold)
                continue
            candidates = placements(job, run.devices, busy)
            if not candidates:
                if job.world > 1 or job.avoid_devices:  # a gang job waits for N free slots; others may fit
                    self._set_waiting(job, no_slot)
                    continue
                self.store.set_waiting_after(run.id, job.seq - 1, no_slot)  # this one and every job behind it
                break
            chosen, reason = self._first_fitting(job, candidates, running)
            self._set_waiting(job, reason)
            if chosen is None:
                continue
            for device in chosen:
                busy[device.id] = busy.get(device.id, 0) + slots_taken(job.world, device.id, len(chosen))
            note = self._admission.prior_note(job, chosen[0])
            if note:  # the history says why unmeasured jobs started together
                self.store.add_transition(run.id, job.id, HistoryKind.ADMISSION, note)
            mates = self._group_starts.fuse_mates(run, job, chosen[0], running, taken) if len(chosen) == 1 else []
            if mates:  # one process, one slot, for the job and its mates (plan ``fuse: auto``)
                self._start_together(job, mates, chosen[0], taken, running, pack=False)
                continue
            pack = self._group_starts.pack_mates(run, job, chosen[0], taken) if len(chosen) == 1 else []
            if pack:  # one Slurm job, one slot, one import of the training stack (plan ``slurm.pack``)
                self._start_together(job, pack, chosen[0], taken, running, pack=True)
                continue
            with self._errors.job_guard(job.id, "engine error starting this job", self._faults.fail_job):
                alone = self._group_starts.alone_reason(run, job, chosen[0]) if len(chosen) == 1 else None
                if alone:
                    self.store.add_transition(run.id, job.id, HistoryKind.FUSED, alone)
                self._starts.start(job, merge(chosen), batch)
            running.append(self.store.job(job.id))
        self._starts.launch_batch(run.id, batch or [])

    def _start_together(self, job: JobRow, mates: list[JobRow], device: Device, taken: set[int],
                        running: list[JobRow], *, pack: bool) -> None:
        """A fused group or a warm pack of ``job`` and its mates: one launch, one slot; the mates are
        no longer queued (started, taken over or failed), the members that run count as running."""
        what = "pack" if pack else "fused group"
        with self._errors.job_guard(job.id, f"engine error starting this {what}", self._faults.fail_job):
            self._group_starts.start([job, *mates], device, pack=pack)
            taken.update(j.id for j in mates)
            running.extend(j for m in [job, *mates] if (j := self.store.job(m.id)).state is JobState.RUNNING)

    def _waits(self, job: JobRow) -> bool:
        """A job held for others (after:) or for its search's stage 1: its reason is written already."""
        return self._dependencies.hold(job) or self._promotion.hold(job)

    def _set_waiting(self, job: JobRow, reason: str | None) -> None:
        """Why a queued job waits, written only when it changes: most admitted jobs had no reason
        and get none, and a write transaction each would cost more than the check. ``job`` is this
        pass's row: nothing else writes a queued job's reason meanwhile."""
        if (job.waiting or "") != (reason or ""):
            self.store.set_waiting(job.id, reason)

    def _running_on_host(self, run: RunRow) -> list[JobRow]:
        """Every active run's running jobs on the same backend: one device ledger per state directory."""
        name = self._state.backend(run.id).name
        return [j for other in self.store.active_run_ids() if self._state.backend(other).name == name
                for j in self.store.running_jobs(other)]

    def _submits_arrays(self, run_id: int) -> bool:
        """``slurm.array: true``: the jobs of one admission pass go to the backend in one call."""
        return self._state.backend(run_id).submits_arrays

    def _first_fitting(self, job: JobRow, candidates: list[list[Device]], running: list[JobRow]
                       ) -> tuple[list[Device] | None, str | None]:
        """(devices, None) for the first candidate set the job fits on, else (None, the first reason)."""
        first_reason = None
        for devices in candidates:
            reason = next((r for d in devices if (r := self._admission.blocker(job, d, running))), None)
            if reason is None:
                return devices, None
            first_reason = first_reason or reason
        return None, first_reason

    # ------------------------------------------------------------------ usage
    def _sample_usage(self) -> None:
        """Process-tree RSS and GPU memory of every active run's running jobs (one reading per
        interval for all runs), so peaks survive into status, results and admission."""
        if self._clock() - self._last_sample < self._sample_every_s:
            return
        self._last_sample = self._clock()
        local = [r for r in self.store.active_runs() if self._state.backend(r.id).samples_local_processes]
        pids: dict[int, int] = {}
        inherited: dict[int, int] = {}
        for attempt in (a for r in local for a in self.store.open_attempts(r.id)):
            if not attempt.pid:
                continue
            record = self._pid_record(attempt.id, AttemptFiles(attempt.exit_path))
            if record is None:  # not yet written: a warm-started job's inherited memory is not known yet
                continue
            pids[attempt.job_id], inherited[attempt.job_id] = attempt.pid, record.rss_at_fork
        if not pids:  # pids of remote (Slurm) jobs mean nothing on this host
            return
        on_gpu = any(not d.is_cpu for r in local for d in r.devices)
        gpus = self._gpu_probe.snapshot() if on_gpu else GpuSnapshot(())
        alone = self._groups.record_usage(job_usage(pids, gpus, inherited))  # a fused group's is the group's
        self.store.record_usage({job_id: (u.rss_bytes, u.gpu_bytes) for job_id, u in alone.items()})

    def _pid_record(self, attempt_id: int, files: AttemptFiles) -> PidRecord | None:
        """The attempt's runner's pid record, read until it is written, then kept while it runs."""
        record = self._state.pid_records.get(attempt_id) or files.runner().read_pid()
        if record is not None:
            self._state.pid_records[attempt_id] = record
        return record

    # ------------------------------------------------------------------ progress
    def _read_progress(self, run: RunRow) -> None:
        for job in self.store.running_jobs(run.id):
            with self._errors.job_guard(job.id, "engine error reading this job's events", self._faults.fail_job):
                self._progress.read(job)

    # ------------------------------------------------------------------ commands
    def _handle_commands(self, run: RunRow) -> None:
        for pending in self.store.pending_commands(run.id):
            status, result = self._commands.answer(run, pending.command)
            self.store.finish_command(pending.id, status, result)

    def cancel(self, job: JobRow) -> None:
        """Queued: cancelled at once. Running: SIGTERM to its process group, SIGKILL after a grace; a
        fused group's member: its cancel marker (the group's process is shared)."""
        if job.state is JobState.QUEUED:
            self.store.set_job_state(job.id, JobState.CANCELLED, "cancelled before start", ended=self._clock())
            return
        attempts = [a for a in self.store.open_attempts(job.run_id) if a.job_id == job.id]
        if not attempts:  # running with no attempt (an engine crash): nothing to stop
            self.store.set_job_state(job.id, JobState.CANCELLED, "cancelled; no process was running",
                                     ended=self._clock(), error="cancelled by user")
        for attempt in attempts:
            self.store.request_cancel(attempt.id, self._clock())
            self._stop_process(job, attempt)

    def stop_pruned(self, job: JobRow, why: str) -> None:
        """The sweep's halving stops a running job: it ends ``pruned`` with ``why`` (the cancel's
        signal, or a fused member's cancel marker)."""
        for attempt in (a for a in self.store.open_attempts(job.run_id) if a.job_id == job.id):
            if self.store.request_stop(attempt.id, self._clock(), why):
                self._stop_process(job, attempt)

    def _stop_process(self, job: JobRow, attempt: AttemptRow) -> None:
        if not self._groups.cancel_member(job, attempt) and attempt.pid:
            self._state.backend(job.run_id).signal(attempt.pid, signal.SIGTERM)

