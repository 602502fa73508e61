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


from lat_core.contract.devices import Device
from lat_core.engine.remedy import still_effective
from lat_core.engine.retries import backoff_hold
from lat_core.engine.admission import Admission, AdmissionPolicy
from lat_core.engine.commands import Commands
from lat_core.engine.backends import get_backend
from lat_core.engine.backends.local import LocalBackend
from lat_core.contract.job_files import (EventTail, events_path, exit_record_path, last_progress, memory_event_peak,
                                read_pid_record)
from lat_core.engine.launch import LaunchSpec, launch, read_exit_record
from lat_core.monitor.gpu import GpuProbe, GpuSnapshot
from lat_core.monitor.usage import job_usage
from lat_core.engine.mps import start_mps
from lat_core.engine.placement import (distributed_argv, distributed_env, find_free_port, free_slots, merge, placements,
                                       slots_used)
from lat_core.engine.notices import RunNotices
from lat_core.engine.fusion import runner_exit_path
from lat_core.engine.faults import (JOURNAL_ERRORS, EngineErrors, disk_full, disk_full_failure, disk_full_pause,
                                   engine_must_stop, journal_locked)
from lat_core.engine.groups import FusedGroups
from lat_core.engine.recovery import Recovery
from lat_core.contract.states import HistoryKind, JobState, RunState
from lat_core.contract.journal import AttemptRow, JobRow, RunRow, Store
from lat_core.triage import classify, read_oom_kill_count
from lat_core.triage.hostoom import oom_kill_readings
from lat_core.engine.warm import WarmStarts
from lat_core.contract.run_secrets import JobSecrets
from lat_core.contract.saved_plan import SavedPlan
from lat_core.errors import JournalError

CANCEL_GRACE_S = 10.0
SAMPLE_EVERY_S = 2.0


class Engine(Recovery, FusedGroups):
    def __init__(self, store: Store, *, launch_fn=launch, backend=None, clock=time.time, secrets: dict | None = None,
                 gpu_probe: GpuProbe | None = None, sample_every_s: float = SAMPLE_EVERY_S,
                 policy: AdmissionPolicy | None = None):
        self.store = store
        self._default_backend = backend or LocalBackend(launch_fn)
        self._backends: dict[int, object] = {}
        self._plans: dict[int, SavedPlan] = {}
        self._clock = clock
        self._secrets = dict(os.environ if secrets is None else secrets)
        self._popens: dict[int, object] = {}  # attempt id -> Popen, only to reap our own children
        self._pid_records: dict[int, object] = {}  # attempt id -> its runner's PidRecord, once written
        self._tails: dict[int, EventTail] = {}  # job id -> where its events.jsonl was read up to
        self._fuse_keys: dict[tuple[int, int], tuple] = {}  # (job id, attempts) -> (fuse key, group limit)
        self._group_popens: list = []  # runners of fused groups, polled until they end
        self._groups_killed: set[int] = set()  # last members' attempt ids whose group outlived them
        self._errors = EngineErrors(store, clock, on_disk_full=self._disk_full)
        self._commands = Commands(self)
        self._job_secrets = JobSecrets(Path(store.path).parent, self._secrets)
        self._notices = RunNotices(store, self._secrets, secrets_of=self._job_secrets.of)
        self._gpu_probe = gpu_probe or GpuProbe()
        self._admission = Admission(store, self._gpu_probe, policy=policy, clock=clock)
        self._sample_every_s = sample_every_s
        self._last_sample = 0.0
        self._mps: dict[int, object] = {}  # run id -> MpsDaemon or None (plan field ``mps``)
        # warm start forks jobs from a preloaded process: only where jobs really launch as processes
        self._warm = WarmStarts(store, allowed=backend is None and launch_fn is launch, plan_of=self.plan_of,
                                warm_capable=lambda run_id: self.backend(run_id).supports_warm_start, clock=clock)

    def backend(self, run_id: int):
        """The run's backend (plan field ``backend``); tests may inject one for every run."""
        if run_id not in self._backends:
            self._backends[run_id] = self._default_backend
            plan = self.plan_of(run_id)
            if plan.backend != "local":
                self._backends[run_id] = get_backend(plan.backend, **plan.slurm)
        return self._backends[run_id]

    def plan_of(self, run_id: int) -> SavedPlan:
        """The run's saved plan (read once per run)."""
        if run_id not in self._plans:
            self._plans[run_id] = self.store.run(run_id).plan
        return self._plans[run_id]

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
        self._reap(run)
        self._settle_orphans(run)
        self._read_progress(run)
        if run.state is RunState.COUNTDOWN and self._clock() >= run.countdown_until:
            self.store.set_run_state(run.id, RunState.RUNNING, "countdown over")
            run = self.store.run(run.id)
        if run.state in (RunState.COUNTDOWN, RunState.RUNNING):
            self._refuse_damaged_plan(run)
            self._warm.prepare(run)
        if run.state is RunState.RUNNING:
            self._notices.run_started(run)
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
            succeeded = counts.get(JobState.SUCCEEDED, 0)
            final = RunState.CANCELLED if run.state is RunState.CANCELLING else RunState.FINISHED
            self.store.set_run_state(run.id, final, f"{succeeded} succeeded, {sum(counts.values()) - succeeded} not")
            self._notices.run_finished(self.store.run(run.id))
            daemon = self._mps.pop(run.id, None)
            if daemon is not None:
                daemon.stop()

    # ------------------------------------------------------------------ admission
    def _admit(self, run: RunRow) -> None:
        """Plan order, no barrier: each queued job takes the freest device that has a slot and the
        memory it is expected to need; a job that waits for memory does not block smaller ones."""
        if not self.store.queued_jobs(run.id, limit=1):
            return
        if run.paused:  # every queued job says why it waits, in one statement
            self.store.set_waiting_after(run.id, 0, self.store.pause_reason(run.id))
            return
        on_host = self._running_on_host(run)
        running, busy = list(on_host), self._busy_slots(on_host, slots_used(on_host))
        no_slot = f"no free slot on {'/'.join(d.id for d in run.devices)}"
        if not free_slots(run.devices, busy):
            self.store.set_waiting_after(run.id, 0, no_slot)  # none could start: none is read
            return
        local = self.backend(run.id).samples_local_processes
        self._admission.begin(run.devices if local else None, min_free_gb=self.plan_of(run.id).min_free_gb)
        batch = [] if self._submits_arrays(run.id) else None
        taken: set[int] = set()  # started this pass as members of a fused group
        for job in self.store.iter_queued(run.id):
            if job.id in taken:
                continue
            if (hold := self._warm.hold(job) or backoff_hold(job, self._clock())) is not None:
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
                busy[device.id] = busy.get(device.id, 0) + (job.world if len(chosen) == 1 else 1)
            note = self._admission.prior_note(job, chosen[0])
            if note:  # the history says why unmeasured jobs started together
                self.store.add_transition(run.id, job.id, HistoryKind.ADMISSION, note)
            mates = self._fuse_mates(run, job, chosen[0], running, taken) if len(chosen) == 1 else []
            if mates:  # one process, one slot, for the job and its mates (plan ``fuse: auto``)
                with self._errors.job_guard(job.id, "engine error starting this fused group", self._job_fault):
                    self._start_group([job, *mates], chosen[0])
                    taken.update(j.id for j in mates)  # started, taken over or failed: no longer queued
                    running.extend(j for m in [job, *mates] if (j := self.store.job(m.id)).state is JobState.RUNNING)
                continue
            with self._errors.job_guard(job.id, "engine error starting this job", self._job_fault):
                self._start(job, merge(chosen), batch)
            running.append(self.store.job(job.id))
        self._launch_batch(run.id, batch or [])

    def _set_waiting(self, job: JobRow, reason: str | None) -> None:
        """Why a queued job waits, written only when it changes: most admitted jobs had no reason
        and get none, and a write transaction each would cost more than the check. ``job`` is this
        pass's row: nothing else writes a queued job's reason meanwhile."""
        if (job.waiting or "") != (reason or ""):
            self.store.set_waiting(job.id, reason)

    def _running_on_host(self, run: RunRow) -> list[JobRow]:
        """Every active run's running jobs on the same backend: one device ledger per state directory."""
        name = self.backend(run.id).name
        return [j for other in self.store.active_run_ids() if self.backend(other).name == name
                for j in self.store.running_jobs(other)]

    def _submits_arrays(self, run_id: int) -> bool:
        """``slurm.array: true``: the jobs of one admission pass go to the backend in one call."""
        return self.backend(run_id).submits_arrays

    def _first_fitting(self, job: JobRow, candidates: list[list[dict]], running: list[JobRow]):
        """(devices, None) for the first candidate set the job fits on, else (None, the first reason)."""
        first_reason = None
        for devices in candidates:
            reason = next((r for d in devices if (r := self._admission.blocker(job, d, running))), None)
            if reason is None:
                return devices, None
            first_reason = first_reason or reason
        return None, first_reason

    def _start(self, job: JobRow, device: Device, batch: list | None = None) -> None:
        """Attempt row and running state first, then the launch; with ``batch``, the launch waits for
        :meth:`_launch_batch` at the end of the admission pass."""
        if (lost := self._lost_attempt(job)) is not None:
            self._take_over(job, device.id, lost)  # the journal had lost it: never launch a job twice
            return
        job_dir = Path(job.job_dir)
        exit_path = exit_record_path(job_dir, job.attempts + 1)
        attempt_id, n = self.store.start_attempt(job.id, device.id, str(exit_path), started=self._clock())
        env = {**self._job_secrets.unmask(job.run_id, job.env), **device.env, **self._mps_env(job.run_id),
               "LAT_JOB_ID": str(job.id), "LAT_ATTEMPT": str(n), "LAT_SUITE": job.suite}
        try:
            argv, env = self._distributed(job, argv=job.argv, env=env)
            if batch is not None and not job.backend_options:
                batch.append((job, attempt_id, LaunchSpec(argv, env, job_dir, exit_path, tuple(job.env))))
                return
            launched = (self._warm.launch(job, argv, env, job_dir, exit_path)
                        or self._job_backend(job).launch(argv, env, job_dir, exit_path, tuple(job.env)))
        except JOURNAL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever stops this launch fails this job alone
            self._launch_failed(job, attempt_id, exc)
            return
        self._launched(job, attempt_id, launched)

    def _mps_env(self, run_id: int) -> dict:
        """The client env of the run's private MPS daemon (plan ``mps: true``), started on first use;
        where MPS cannot run, the history says why and jobs run without it."""
        if not self.plan_of(run_id).mps or not self.backend(run_id).samples_local_processes:
            return {}
        if run_id not in self._mps:
            gpus = [d for d in self.store.run(run_id).devices if not d.is_cpu]
            daemon, why = None, "the run has no GPU"
            if gpus:
                base = Path(self.store.path).parent / "mps" / f"run{run_id}"
                daemon, why = start_mps(base, ",".join(d.uuid or str(d.index) for d in gpus))
            self._mps[run_id] = daemon
            self.store.add_transition(run_id, None, HistoryKind.MPS, why if daemon else f"not used: {why}")
        daemon = self._mps[run_id]
        return daemon.client_env() if daemon is not None else {}

    def _launch_batch(self, run_id: int, batch: list) -> None:
        if not batch:
            return
        try:
            launched = self.backend(run_id).launch_many([spec for _, _, spec in batch])
        except OSError as exc:
            for job, attempt_id, _ in batch:
                self._launch_failed(job, attempt_id, exc)
            return
        for (job, attempt_id, _), one in zip(batch, launched):  # an OSError: that job's launch failed
            if isinstance(one, OSError):
                self._launch_failed(job, attempt_id, one)
            else:
                self._launched(job, attempt_id, one)

    def _launch_failed(self, job: JobRow, attempt_id: int, exc: Exception) -> None:
        if disk_full(exc):
            self._disk_full(job.id, exc)
            return
        self.store.finish_attempt(attempt_id, None, JobState.FAILED, f"launch failed: {exc}", ended=self._clock(),
                                  error=f"launch failed: {exc}")

    def _disk_full(self, job_id: int, exc: OSError) -> None:
        """The engine could not write a job's files: the disk is full. That job fails as such (no
        engine error, requeueable at once) and the run admits nothing more until the user resumes."""
        run = self.store.run(self.store.job(job_id).run_id)
        error, diagnosis = disk_full_failure(exc, run.output_root)
        self._job_fault(job_id, error, diagnosis=diagnosis)
        self._pause_for_full_disk(run)

    def _pause_for_full_disk(self, run: RunRow) -> None:
        """Every job started next would fail the same way within seconds: one pause, one reason."""
        if not self.store.run(run.id).paused:
            self.store.set_paused(run.id, True, disk_full_pause(run.output_root))

    def _launched(self, job: JobRow, attempt_id: int, launched) -> None:
        counter = self._oom_counter_at_launch(job, launched.pid)
        self.store.set_attempt_pid(attempt_id, launched.pid, launched.pid_start,
                                   (counter.source, counter.count) if counter and counter.known else None)
        if launched.popen is not None:
            self._popens[attempt_id] = launched.popen

    def _oom_counter_at_launch(self, job: JobRow, pid: int):
        """The kernel's OOM-kill counter for the runner's memory cgroup, recorded with its pid in one
        transaction. Optional evidence for triage: a counter that cannot be read is unknown, never a
        reason to lose the pid (the engine could no longer stop the job)."""
        if not self.backend(job.run_id).samples_local_processes:
            return None
        try:
            return read_oom_kill_count(pid)
        except Exception:  # noqa: BLE001 - see above
            return None

    # ------------------------------------------------------------------ reaping
    def _distributed(self, job: JobRow, *, argv: list[str], env: dict) -> tuple[list[str], dict]:
        """Multi-process jobs run under torchrun on a probed free rendezvous port (reported)."""
        if job.world == 1:
            return argv, env
        port, tries = find_free_port()
        self.store.add_transition(job.run_id, job.id, HistoryKind.RENDEZVOUS, f"port {port} after {tries} probe(s)")
        return distributed_argv(argv, job.world, port), {**env, **distributed_env(job.world, port, bool(job.use_libuv))}

    def _remember_peak(self, job: JobRow) -> None:
        """What this config needed, for memory-aware admission of its next jobs."""
        event_peak = memory_event_peak(Path(job.job_dir))
        gpu = max(job.peak_gpu or 0, event_peak)
        if gpu or job.peak_rss:
            self.store.record_config_peak(job.profile_key, gpu, job.peak_rss or 0)

    def _triage(self, job: JobRow, attempt: AttemptRow, returncode: int | None):
        backend = self._job_backend(job)
        found = backend.diagnose(attempt.pid) if backend.diagnoses_failures and attempt.pid else None  # Slurm's verdict
        if found is None:
            before, after = oom_kill_readings(read_exit_record(Path(attempt.exit_path)), attempt.oom_source,
                                              attempt.oom_before)
            found = classify(Path(job.job_dir), returncode, cancelled=attempt.cancel_at is not None,
                             oom_kills_before=before, oom_kills_after=after,
                             env=job.env)  # the live env: remedies already applied count
        return still_effective(self.store.run(job.run_id), job, found)

    def _job_backend(self, job: JobRow):
        """The run's backend, with this job's own options (a remedy's Slurm time/mem) where it has them."""
        backend = self.backend(job.run_id)
        return backend.with_options(job.backend_options) if job.backend_options else backend

    def _enforce_cancel_grace(self, run: RunRow, attempt: AttemptRow) -> None:
        if attempt.cancel_at is not None and self._clock() >= attempt.cancel_at + CANCEL_GRACE_S and attempt.pid:
            if self._may_kill(attempt):  # a fused group's process: once no member needs it
                self.backend(run.id).signal(attempt.pid, signal.SIGKILL)

    # ------------------------------------------------------------------ usage
    def _sample_usage(self) -> None:
        """Process-tree RSS and GPU memory of every active run's running jobs (one reading per
        interval for all runs), so peaks survive into status, results and admission."""
        if self._clock() - self._last_sample < self._sample_every_s:
            return
        self._last_sample = self._clock()
        local = [r for r in self.store.active_runs() if self.backend(r.id).samples_local_processes]
        pids, inherited = {}, {}
        for attempt in (a for r in local for a in self.store.open_attempts(r.id) if a.pid):
            record = self._pid_records.get(attempt.id) or read_pid_record(runner_exit_path(Path(attempt.exit_path)))
            if record is None:  # not yet written: a warm-started job's inherited memory is not known yet
                continue
            self._pid_records[attempt.id] = record
            pids[attempt.job_id], inherited[attempt.job_id] = attempt.pid, record.rss_at_fork
        if not pids:  # pids of remote (Slurm) jobs mean nothing on this host
            return
        on_gpu = any(not d.is_cpu for r in local for d in r.devices)
        gpus = self._gpu_probe.snapshot() if on_gpu else GpuSnapshot(())
        alone = self._record_group_usage(job_usage(pids, gpus, inherited))  # a fused group's is the group's
        self.store.record_usage({job_id: (u.rss_bytes, u.gpu_bytes) for job_id, u in alone.items()})

    # ------------------------------------------------------------------ progress
    def _read_progress(self, run: RunRow) -> None:
        for job in self.store.running_jobs(run.id):
            with self._errors.job_guard(job.id, "engine error reading this job's events", self._job_fault):
                self._read_events(job)

    def _read_events(self, job: JobRow) -> tuple[int, float | None] | None:
        """Record the job's newest (step, loss) since the last read; returns it, None when none."""
        if job.id not in self._tails:
            self._tails[job.id] = EventTail.near_end(events_path(Path(job.job_dir)))
        tail = self._tails[job.id]
        bad_before = tail.bad_lines
        last = last_progress(tail.read())
        if last is not None:
            self.store.set_progress(job.id, *last)
        if tail.bad_lines > bad_before:  # told once per job, then counted
            detail = f"{tail.bad_lines} bad line(s) skipped; first: {tail.first_bad}"
            if bad_before == 0 or tail.bad_lines >= 10 * bad_before:
                self.store.add_transition(job.run_id, job.id, HistoryKind.BAD_EVENTS, detail)
        return last

    # ------------------------------------------------------------------ commands
    def _handle_commands(self, run: RunRow) -> None:
        for command in self.store.pending_commands(run.id):
            handler = getattr(self._commands, f"cmd_{command['verb']}", None)
            if handler is None:
                self.store.finish_command(command["id"], "rejected", f"unknown command {command['verb']!r}")
                continue
            try:
                status, result = handler(run, command)
            except JOURNAL_ERRORS:
                raise
            except Exception as exc:  # noqa: BLE001 - a bad command is answered, never fatal
                status, result = "failed", f"engine error: {type(exc).__name__}: {exc}"
            self.store.finish_command(command["id"], status, result)

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
            if not self._cancel_member(job, attempt) and attempt.pid:
                self.backend(job.run_id).signal(attempt.pid, signal.SIGTERM)

