"""The scheduler loop: countdown, admission into free slots, reaping, commands.

No round barrier: whenever a slot frees, the next queued job (plan order) takes it at once, and a
failed job never stops the others. The engine is the only writer of job state; it reads commands
that front ends append to the journal. ``python -m lat_core.engine --state-dir DIR`` runs it as its
own detached process (see :mod:`lat_core.service`), holding a lock so two engines never share a
state directory.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import yaml

from lat_core.engine.retries import maybe_retry
from lat_core.engine.admission import Admission, AdmissionPolicy
from lat_core.engine.commands import Commands
from lat_core.config.env import MASK
from lat_core.engine.backends import get_backend
from lat_core.engine.backends.local import LocalBackend
from lat_core.job_files import describe_exit, last_step, memory_event_peak
from lat_core.engine.launch import LaunchSpec, launch, read_exit_record
from lat_core.monitor.gpu import GpuProbe, GpuSnapshot
from lat_core.monitor.usage import job_usage
from lat_core.engine.mps import start_mps
from lat_core.engine.placement import (distributed_argv, distributed_env, find_free_port, free_slots, merge, placements,
                                       slots_used)
from lat_core.engine.notices import RunNotices
from lat_core.store import AttemptRow, JobRow, RunRow, Store
from lat_core.triage import classify, read_oom_kill_count, reread_oom_kill_count
from lat_core.engine.warm import WarmStarts

CANCEL_GRACE_S = 10.0
SAMPLE_EVERY_S = 2.0
LAUNCH_GRACE_S = 30.0


class Engine:
    def __init__(self, store: Store, *, launch_fn=launch, backend=None, clock=time.time, secrets: dict | None = None,
                 gpu_probe: GpuProbe | None = None, sample_every_s: float = SAMPLE_EVERY_S,
                 policy: AdmissionPolicy | None = None):
        self.store = store
        self._default_backend = backend or LocalBackend(launch_fn)
        self._backends: dict[int, object] = {}
        self._plans: dict[int, dict] = {}
        self._clock = clock
        self._secrets = dict(os.environ if secrets is None else secrets)
        self._popens: dict[int, object] = {}  # attempt id -> Popen, only to reap our own children
        self._events_offset: dict[int, int] = {}
        self._commands = Commands(self)
        self._notices = RunNotices(store, self._secrets)
        self._gpu_probe = gpu_probe or GpuProbe()
        self._admission = Admission(store, self._gpu_probe, policy=policy, clock=clock)
        self._sample_every_s = sample_every_s
        self._last_sample = 0.0
        self._mps: dict[int, object] = {}  # run id -> MpsDaemon or None (plan field ``mps``)
        # warm start forks jobs from a preloaded process: only where jobs really launch as processes
        self._warm = WarmStarts(store, allowed=backend is None and launch_fn is launch, plan_of=self.plan_of,
                                backend_name=lambda run_id: self.backend(run_id).name, clock=clock)

    def backend(self, run_id: int):
        """The run's backend (plan field ``backend``); tests may inject one for every run."""
        if run_id not in self._backends:
            self._backends[run_id] = self._default_backend
            plan = self.plan_of(run_id)
            name = plan.get("backend", "local")
            if name != "local":
                self._backends[run_id] = get_backend(name, **(plan.get(name) or {}))
        return self._backends[run_id]

    def plan_of(self, run_id: int) -> dict:
        """The run's saved plan as a mapping (read once per run)."""
        if run_id not in self._plans:
            plan = yaml.safe_load(self.store.run(run_id).plan_yaml) or {}
            self._plans[run_id] = plan if isinstance(plan, dict) else {}
        return self._plans[run_id]

    def now(self) -> float:
        return self._clock()

    # ------------------------------------------------------------------ loop
    def tick(self) -> bool:
        """One pass over every active run; True while any run is still active.

        Commands to ended runs (requeue, add jobs) are applied first: they may make a run active."""
        for run_id in self.store.runs_with_pending_commands():
            self._handle_commands(self.store.run(run_id))
        for run in self.store.active_runs():
            self._tick_run(run)
        active = bool(self.store.active_runs())
        if not active:
            self.close()
        return active

    def close(self) -> None:
        """Stop what the engine started for its runs (the warm-start process); jobs run on."""
        self._warm.close()

    def run(self, poll_interval: float = 0.5, on_tick=None) -> None:
        while self.tick():
            if on_tick:
                on_tick()
            time.sleep(poll_interval)
        if on_tick:
            on_tick()

    def _tick_run(self, run: RunRow) -> None:
        self._handle_commands(run)
        run = self.store.run(run.id)
        self._reap(run)
        self._read_progress(run)
        self._sample_usage(run)
        if run.state == "countdown" and self._clock() >= run.countdown_until:
            self.store.set_run_state(run.id, "running", "countdown over")
            run = self.store.run(run.id)
        if run.state in ("countdown", "running"):
            self._warm.prepare(run)
        if run.state == "running":
            self._notices.run_started(run)
            if not run.paused:
                self._admit(run)
        self._finish_if_drained(run)

    def _finish_if_drained(self, run: RunRow) -> None:
        if not self.store.has_unfinished_jobs(run.id) and not self.store.open_attempts(run.id):
            counts = self.store.job_counts(run.id)
            succeeded = counts.get("succeeded", 0)
            final = "cancelled" if run.state == "cancelling" else "finished"
            self.store.set_run_state(run.id, final, f"{succeeded} succeeded, {sum(counts.values()) - succeeded} not")
            self._notices.run_finished(self.store.run(run.id))
            daemon = self._mps.pop(run.id, None)
            if daemon is not None:
                daemon.stop()

    # ------------------------------------------------------------------ admission
    def _admit(self, run: RunRow) -> None:
        """Plan order, no barrier: each queued job takes the freest device that has a slot and the
        memory it is expected to need; a job that waits for memory does not block smaller ones."""
        running = self.store.running_jobs(run.id)
        busy = slots_used(running)
        if not free_slots(run.devices, busy) or not self.store.queued_jobs(run.id, limit=1):
            return  # no queued job could start, however many wait: none is read
        local = self.backend(run.id).name == "local"
        self._admission.begin(run.devices if local else None, min_free_gb=float(self.plan_of(run.id).get("min_free_gb", 0)))
        batch = [] if self._submits_arrays(run.id) else None
        for job in self.store.iter_queued(run.id):
            if (hold := self._warm.hold(job)) is not None:
                self.store.set_waiting(job.id, hold)
                continue
            candidates = placements(job, run.devices, busy)
            if not candidates:
                if job.world == 1:
                    break
                continue  # a gang job waits for N free slots; single jobs behind it may still fit
            chosen, reason = self._first_fitting(job, candidates, running)
            self.store.set_waiting(job.id, reason)
            if chosen is None:
                continue
            for device in chosen:
                busy[device["id"]] = busy.get(device["id"], 0) + (job.world if len(chosen) == 1 else 1)
            note = self._admission.prior_note(job, chosen[0])
            if note:  # the history says why unmeasured jobs started together
                self.store.add_transition(run.id, job.id, "admission", note)
            self._start(job, merge(chosen), batch)
            running.append(self.store.job(job.id))
        self._launch_batch(run.id, batch or [])

    def _submits_arrays(self, run_id: int) -> bool:
        """``slurm.array: true``: the jobs of one admission pass go to the backend in one call."""
        backend = self.backend(run_id)
        return hasattr(backend, "launch_many") and getattr(getattr(backend, "options", None), "array", False) is True

    def _first_fitting(self, job: JobRow, candidates: list[list[dict]], running: list[JobRow]):
        """(devices, None) for the first candidate set the job fits on, else (None, the first reason)."""
        first_reason = None
        for devices in candidates:
            reason = next((r for d in devices if (r := self._admission.blocker(job, d, running))), None)
            if reason is None:
                return devices, None
            first_reason = first_reason or reason
        return None, first_reason

    def _start(self, job: JobRow, device: dict, batch: list | None = None) -> None:
        """Attempt row and running state first, then the launch; with ``batch``, the launch waits for
        :meth:`_launch_batch` at the end of the admission pass."""
        job_dir = Path(job.job_dir)
        exit_path = job_dir / ".lat" / f"attempt-{job.attempts + 1}.exit.json"
        attempt_id, n = self.store.start_attempt(job.id, device["id"], str(exit_path))
        self.store.set_job_state(job.id, "running", f"attempt {n} on {device['id']}", device=device["id"],
                                 started=self._clock(), ended=None, returncode=None, error=None)
        env = {**self._unmask(job.env), **device["env"], **self._mps_env(job.run_id),
               "LAT_JOB_ID": str(job.id), "LAT_ATTEMPT": str(n)}
        try:
            argv, env = self._distributed(job, argv=job.argv, env=env)
            if batch is not None:
                batch.append((job, attempt_id, LaunchSpec(argv, env, job_dir, exit_path, tuple(job.env))))
                return
            launched = (self._warm.launch(job, argv, env, job_dir, exit_path)
                        or self.backend(job.run_id).launch(argv, env, job_dir, exit_path, tuple(job.env)))
        except OSError as exc:
            self._launch_failed(job, attempt_id, exc)
            return
        self._launched(job, attempt_id, launched)

    def _mps_env(self, run_id: int) -> dict:
        """The client env of the run's private MPS daemon (plan ``mps: true``), started on first use;
        where MPS cannot run, the history says why and jobs run without it."""
        if not self.plan_of(run_id).get("mps") or self.backend(run_id).name != "local":
            return {}
        if run_id not in self._mps:
            gpus = [d for d in self.store.run(run_id).devices if d["id"] != "cpu"]
            daemon, why = None, "the run has no GPU"
            if gpus:
                base = Path(self.store.path).parent / "mps" / f"run{run_id}"
                daemon, why = start_mps(base, ",".join(d.get("uuid") or str(d.get("index")) for d in gpus))
            self._mps[run_id] = daemon
            self.store.add_transition(run_id, None, "mps", why if daemon else f"not used: {why}")
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

    def _launch_failed(self, job: JobRow, attempt_id: int, exc: OSError) -> None:
        self.store.end_attempt(attempt_id, None)
        self.store.set_job_state(job.id, "failed", f"launch failed: {exc}", ended=self._clock(), error=str(exc))

    def _launched(self, job: JobRow, attempt_id: int, launched) -> None:
        self.store.set_attempt_pid(attempt_id, launched.pid, launched.pid_start)
        counter = read_oom_kill_count(launched.pid) if self.backend(job.run_id).name == "local" else None
        if counter and counter.known:
            self.store.set_attempt_oom_counter(attempt_id, counter.source, counter.count)
        if launched.popen is not None:
            self._popens[attempt_id] = launched.popen

    def _unmask(self, env: dict) -> dict:
        """The journal holds secrets masked; their values come from the engine's own environment.
        A secret this engine never received is left out (never passed on as ``***``)."""
        known = {k: self._secrets.get(k) for k, v in env.items() if v == MASK}
        plain = {k: v for k, v in env.items() if v != MASK}
        return {**plain, **{k: v for k, v in known.items() if v and v != MASK}}

    # ------------------------------------------------------------------ reaping
    def _reap(self, run: RunRow) -> None:
        for attempt in self.store.open_attempts(run.id):
            popen = self._popens.get(attempt.id)
            if popen is not None:
                popen.poll()  # reap our own child so it does not linger as a zombie
            if attempt.pid is None:
                attempt = self._recover_pid(attempt, run.id)
            record = read_exit_record(Path(attempt.exit_path))
            if record is not None:
                self._record_exit(attempt, record.get("returncode"), record.get("max_rss"))
            elif attempt.pid and not self.backend(run.id).is_alive(attempt.pid, attempt.pid_start):
                record = read_exit_record(Path(attempt.exit_path))  # it may have just been written
                self._record_exit(attempt, *((record.get("returncode"), record.get("max_rss")) if record else (None, None)))
            else:
                self._enforce_cancel_grace(run, attempt)

    def _distributed(self, job: JobRow, *, argv: list[str], env: dict) -> tuple[list[str], dict]:
        """Multi-process jobs run under torchrun on a probed free rendezvous port (reported)."""
        if job.world == 1:
            return argv, env
        port, tries = find_free_port()
        self.store.add_transition(job.run_id, job.id, "rendezvous", f"port {port} after {tries} probe(s)")
        return distributed_argv(argv, job.world, port), {**env, **distributed_env(job.world, port, bool(job.use_libuv))}

    def _recover_pid(self, attempt: AttemptRow, run_id: int) -> AttemptRow:
        """An engine that died between recording an attempt and its pid: the runner's own pid file
        (or, for a backend with ``recover`` such as Slurm, the scheduler's queue) says whether the
        launch happened. Never relaunch: nothing found after a grace = failed."""
        recover = getattr(self.backend(run_id), "recover", None)
        if recover is not None:  # the runner's pid file holds a pid on another host: useless here
            found = recover(Path(attempt.exit_path), attempt.launched)
            started = {"pid": found.pid, "pid_start": found.pid_start} if found else None
        else:
            started = read_exit_record(Path(attempt.exit_path + ".pid"))
        if started:
            self.store.set_attempt_pid(attempt.id, started["pid"], started["pid_start"])
            return self.store.attempts(attempt.job_id)[-1]
        if self._clock() - attempt.launched > LAUNCH_GRACE_S:
            self.store.end_attempt(attempt.id, None)
            self.store.set_job_state(attempt.job_id, "failed", "launch interrupted by an engine crash",
                                     ended=self._clock(), error="launch interrupted by an engine crash; requeue it")
        return attempt

    def _record_exit(self, attempt: AttemptRow, returncode: int | None, max_rss: int | None = None) -> None:
        self._popens.pop(attempt.id, None)
        if max_rss:  # the kernel's peak for the trainer: jobs shorter than a sampling interval have one too
            self.store.record_peak_rss(attempt.job_id, max_rss)
        cancelled = attempt.cancel_at is not None
        self.store.end_attempt(attempt.id, returncode)
        job = self.store.job(attempt.job_id)
        if job.state != "running":
            return
        self._read_events(job)  # the steps it logged since the last tick: the table's final step and loss
        job = self.store.job(job.id)
        if returncode == 0:
            state, error, diagnosis = "succeeded", None, None
            self._remember_peak(job)
        elif cancelled:
            state, error, diagnosis = "cancelled", "cancelled by user", None
        else:
            state = "failed"
            diagnosis = self._triage(job, attempt, returncode)
            error = describe_exit(returncode, Path(job.job_dir), diagnosis)
        self.store.set_job_state(job.id, state, error or "exit 0", ended=self._clock(), returncode=returncode,
                                 error=error, diagnosis_json=json.dumps(diagnosis.to_json()) if diagnosis else None)
        if state == "failed":
            run, failed = self.store.run(job.run_id), self.store.job(job.id)
            self._notices.job_failed(run, failed)
            maybe_retry(self.store, run, failed)

    def _remember_peak(self, job: JobRow) -> None:
        """What this config needed, for memory-aware admission of its next jobs."""
        event_peak = memory_event_peak(Path(job.job_dir))
        gpu = max(job.peak_gpu or 0, event_peak)
        if gpu or job.peak_rss:
            self.store.record_config_peak(job.profile_key, gpu, job.peak_rss or 0)

    def _triage(self, job: JobRow, attempt: AttemptRow, returncode: int | None):
        diagnose = getattr(self.backend(job.run_id), "diagnose", None)
        if diagnose is not None and attempt.pid:  # Slurm's own verdict: time limit, memory, node, preemption
            found = diagnose(attempt.pid)
            if found is not None:
                return found
        after = reread_oom_kill_count(attempt.oom_source).count if attempt.oom_source else None
        return classify(Path(job.job_dir), returncode, cancelled=attempt.cancel_at is not None,
                        oom_kills_before=attempt.oom_before, oom_kills_after=after)

    def _enforce_cancel_grace(self, run: RunRow, attempt: AttemptRow) -> None:
        if attempt.cancel_at is not None and self._clock() >= attempt.cancel_at + CANCEL_GRACE_S and attempt.pid:
            self.backend(run.id).signal(attempt.pid, signal.SIGKILL)

    # ------------------------------------------------------------------ usage
    def _sample_usage(self, run: RunRow) -> None:
        """Process-tree RSS and GPU memory of running jobs, so peaks survive into status and results."""
        if self._clock() - self._last_sample < self._sample_every_s or self.backend(run.id).name != "local":
            return  # pids of remote (Slurm) jobs mean nothing on this host
        self._last_sample = self._clock()
        pids = {a.job_id: a.pid for a in self.store.open_attempts(run.id) if a.pid}
        if not pids:
            return
        gpus = self._gpu_probe.snapshot() if any(d["id"] != "cpu" for d in run.devices) else GpuSnapshot(())
        usage = job_usage(pids, gpus)
        self.store.record_usage({job_id: (u.rss_bytes, u.gpu_bytes) for job_id, u in usage.items()})

    # ------------------------------------------------------------------ progress
    def _read_progress(self, run: RunRow) -> None:
        for job in self.store.running_jobs(run.id):
            self._read_events(job)

    def _read_events(self, job: JobRow) -> None:
        path = Path(job.job_dir) / "events.jsonl"
        offset = self._events_offset.get(job.id, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
        except FileNotFoundError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._events_offset[job.id] = offset + len(complete)
        last = last_step(complete)
        if last is not None:
            self.store.set_progress(job.id, *last)

    # ------------------------------------------------------------------ commands
    def _handle_commands(self, run: RunRow) -> None:
        for command in self.store.pending_commands(run.id):
            handler = getattr(self._commands, f"cmd_{command['verb']}", None)
            if handler is None:
                self.store.finish_command(command["id"], "rejected", f"unknown command {command['verb']!r}")
                continue
            status, result = handler(run, command)
            self.store.finish_command(command["id"], status, result)

    def cancel(self, job: JobRow) -> None:
        """Queued: cancelled at once. Running: SIGTERM to its process group, SIGKILL after a grace."""
        if job.state == "queued":
            self.store.set_job_state(job.id, "cancelled", "cancelled before start", ended=self._clock())
            return
        for attempt in self.store.open_attempts(job.run_id):
            if attempt.job_id == job.id and attempt.pid:
                self.store.request_cancel(attempt.id, self._clock())
                self.backend(job.run_id).signal(attempt.pid, signal.SIGTERM)

