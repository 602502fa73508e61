"""How a job's attempt starts: its attempt row and running state first, then its launch, alone or
with the admission pass's other jobs in one call (a backend that submits arrays). A job whose
folder shows an attempt the journal lost is taken over, never launched twice; whatever stops a
launch fails that job alone. A part of :class:`lat_core.engine.loop.Engine` (a fused group's start,
:class:`lat_core.engine.groups.GroupStarts`, goes through it too)."""

from __future__ import annotations

from pathlib import Path

from lat_core.contract.devices import Device
from lat_core.contract.jobdir import JobDir
from lat_core.contract.rows import JobRow
from lat_core.contract.run_secrets import JobSecrets
from lat_core.contract.states import HistoryKind, JobState
from lat_core.engine.closing import close_log
from lat_core.engine.faults import JOURNAL_ERRORS, disk_full
from lat_core.engine.job_faults import JobFaults
from lat_core.engine.launch import Launched, LaunchSpec
from lat_core.engine.mps import RunMps
from lat_core.engine.placement import (distributed_argv, distributed_env, find_free_port, multinode_argv,
                                       standalone_argv)
from lat_core.engine.recovery import Recovery
from lat_core.engine.state import EngineState
from lat_core.engine.warm import WarmStarts
from lat_core.triage import read_oom_kill_count
from lat_core.triage.hostoom import OomCounter

Batch = list[tuple[JobRow, int, LaunchSpec]]  # (job, attempt id, its launch) waiting for the pass's one call


class Starts:
    def __init__(self, state: EngineState, *, recovery: Recovery, faults: JobFaults, warm: WarmStarts,
                 secrets: JobSecrets, mps: RunMps):
        self.store = state.store
        self._clock = state.clock
        self._state = state
        self._recovery = recovery
        self._faults = faults
        self._warm = warm
        self._job_secrets = secrets
        self._mps = mps

    def adopted(self, job: JobRow, device_id: str) -> bool:
        """True where the job's folder holds an attempt the journal had lost: it is taken over
        (running, or settled from what it left) and must never be launched again."""
        lost = self._recovery.lost_attempt(job)
        if lost is None:
            return False
        self._recovery.take_over(job, device_id, lost)
        return True

    def start(self, job: JobRow, device: Device, batch: Batch | None = None) -> None:
        """Attempt row and running state first, then the launch; with ``batch``, the launch waits for
        :meth:`launch_batch` at the end of the admission pass."""
        if self.adopted(job, device.id):
            return
        job_dir = Path(job.job_dir)
        exit_path = JobDir(job_dir).attempt(job.attempts + 1).exit_path
        attempt_id, n = self.store.start_attempt(job.id, device.id, str(exit_path), started=self._clock())
        env = {**self._job_secrets.unmask(job.run_id, job.env), **device.env, **self._mps.env(job.run_id),
               "LAT_JOB_ID": str(job.id), "LAT_ATTEMPT": str(n), "LAT_SUITE": job.suite}
        try:
            argv, env = self._distributed(job, argv=job.argv, env=env)
            if batch is not None and not job.backend_options:
                batch.append((job, attempt_id, LaunchSpec(argv, env, job_dir, exit_path, tuple(job.env), job.world)))
                return
            launched = (self._warm.launch(job, argv, env, job_dir, exit_path)
                        or self._state.job_backend(job).launch(argv, env, job_dir, exit_path, tuple(job.env),
                                                               world=job.world))
        except JOURNAL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever stops this launch fails this job alone
            self.failed(job, attempt_id, exc)
            return
        self.launched(job, attempt_id, launched)

    def launch_batch(self, run_id: int, batch: Batch) -> None:
        if not batch:
            return
        try:
            launched = self._state.backend(run_id).launch_many([spec for _, _, spec in batch])
        except OSError as exc:
            for job, attempt_id, _ in batch:
                self.failed(job, attempt_id, exc)
            return
        for (job, attempt_id, _), one in zip(batch, launched):  # an OSError: that job's launch failed
            if isinstance(one, OSError):
                self.failed(job, attempt_id, one)
            else:
                self.launched(job, attempt_id, one)

    def failed(self, job: JobRow, attempt_id: int, exc: Exception) -> None:
        """The launch of the job's attempt failed: the job fails with why (a full disk: as such)."""
        if disk_full(exc):
            self._faults.disk_full(job.id, exc)
            return
        self.store.finish_attempt(attempt_id, None, JobState.FAILED, f"launch failed: {exc}", ended=self._clock(),
                                  error=f"launch failed: {exc}")
        close_log(job, "failed", f"launch failed: {exc}", self._clock())

    def launched(self, job: JobRow, attempt_id: int, launched: Launched) -> None:
        counter = self._oom_counter_at_launch(job, launched.pid)
        self.store.set_attempt_pid(attempt_id, launched.pid, launched.pid_start,
                                   (counter.source, counter.count) if counter and counter.known else None)
        if launched.popen is not None:
            self._state.popens[attempt_id] = launched.popen

    def _oom_counter_at_launch(self, job: JobRow, pid: int | str) -> OomCounter | None:
        """The kernel's OOM-kill counter for the runner's memory cgroup, recorded with its pid in one
        transaction. Optional evidence for triage: a counter that cannot be read is unknown, never a
        reason to lose the pid (the engine could no longer stop the job)."""
        if not self._state.backend(job.run_id).samples_local_processes or isinstance(pid, str):
            return None  # a scheduler's job id names no process on this host
        try:
            return read_oom_kill_count(pid)
        except Exception:  # noqa: BLE001 - see above
            return None

    def _distributed(self, job: JobRow, *, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """Multi-process jobs run under torchrun on a probed free rendezvous port (reported), or,
        where the backend's jobs run on other hosts, ``--standalone`` on one node, or one torchrun on
        each of its nodes (``slurm.nodes``)."""
        if job.world == 1:
            return argv, env
        backend = self._state.job_backend(job)
        if not backend.samples_local_processes:  # its nodes are not this host: they choose the port
            nodes = backend.nodes_per_job
            how = (f"torchrun on each of {nodes} nodes, c10d rendezvous on the first" if nodes > 1
                   else "torchrun --standalone on its node")
            self.store.add_transition(job.run_id, job.id, HistoryKind.RENDEZVOUS, how)
            wrapped = multinode_argv(argv, job.world, nodes) if nodes > 1 else standalone_argv(argv, job.world)
            return wrapped, {**env, **distributed_env(job.world, None, bool(job.use_libuv))}
        port, tries = find_free_port()
        self.store.add_transition(job.run_id, job.id, HistoryKind.RENDEZVOUS, f"port {port} after {tries} probe(s)")
        return distributed_argv(argv, job.world, port), {**env, **distributed_env(job.world, port, bool(job.use_libuv))}
