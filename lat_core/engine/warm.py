"""The engine's side of warm start (plan field ``warm_start``, on by default).

One preloaded process per engine (:mod:`lat_core.train.warm`) imports torch, transformers and peft
once; a job it can run is forked from it instead of starting a fresh interpreter. Which jobs: one
process (no torchrun), the trainer modules run with this same interpreter, on this machine, and no
added environment variable that the preloaded libraries read while importing (the process was
imported under the engine's environment; the job's own variables are set after the fork).

While the process is still importing, such jobs wait for it (it is doing the imports they would do
themselves); if it fails or gets stuck, jobs start cold and the run's history says why, once. Stuck
is measured in the process's own CPU time, not the wall clock: on a loaded host the imports take
minutes of wall time but the same ~14 s of CPU, so a slow import is waited for and only one that
makes no progress (``READY_STALL_S`` without using any CPU: a lock, a dead mount) or spins
(``READY_CPU_S`` of CPU) is given up on.

Before it serves, the process compiles the GPU kernels of the run's queued jobs once
(:mod:`lat_core.engine.kernel_shapes`, :mod:`lat_core.train.kernel_warmup`), so the jobs load them
from Triton's cache instead of each compiling them at once; meanwhile they wait with that reason.
Compiling happens in its child, so the process itself idles then: while it compiles, only
``KERNEL_WARMUP_LIMIT_S`` of wall time (the process's own limit on the compile) counts as stuck.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from lat_core.config.env import ENV_FIELDS, ENV_PREFIXES, EXTRA_NAMES
from lat_core.contract.kernel_warmup import KernelShape, WarmupPhase, read_phase, write_shapes
from lat_core.engine.kernel_shapes import run_kernel_shapes
from lat_core.engine.launch import Launched, process_start_time
from lat_core.contract.jobdir import AttemptFiles
from lat_core.contract.jobdir.names import TRAIN_LOG
from lat_core.contract.rows import JobRow
from lat_core.contract.states import HistoryKind
from lat_core.safe_files import ensure_folder, open_append

WARM_MODULES = ("lat_core.train", "lat_core.train.pretrain", "lat_core.train.fused")  # fused: a group
# Variables read after the imports (the trainer's own overrides when it loads its config, CUDA's at
# its initialisation, a tracker's when it starts): a job may add these and still fork from the
# preloaded process. Anything else (HF_*, TORCH_*, OMP_*, ...) may already have been read while
# importing, under the engine's value, so such a job starts cold.
LATE_READ_PREFIXES = (*ENV_PREFIXES, "LAT_", "CUDA_", "NCCL_", "TRITON_", "PYTHONUNBUFFERED")
# the runbooks' thread and allocator settings pass through to jobs (config.env.EXTRA_NAMES), but
# the C libraries read them when torch is imported: a forked job would run under the engine's values
READ_AT_IMPORT = frozenset(("TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MALLOC_ARENA_MAX"))
LATE_READ_NAMES = frozenset((*ENV_FIELDS, *EXTRA_NAMES)) - READ_AT_IMPORT
# GLUE_LOCAL_DIR & co.: where the trainer loads its data from; DART_HUB_ID & co.: which hub dataset
LATE_READ_SUFFIXES = ("_LOCAL_DIR", "_HUB_ID")
READY_STALL_S = 120.0  # wall seconds in which the importing process used no CPU at all: stuck
READY_CPU_S = 300.0  # CPU seconds of importing (about 14 s when all is well): spinning
# the kernel warm-up's own limit (lat_core.train.warm): only a hang takes this long (eight jobs
# compiling the SST-2 suite's kernels at once took 355 s on an H100; one process does less work)
KERNEL_WARMUP_LIMIT_S = 1200.0
SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes
PREPARE_LOOKAHEAD = 16  # queued jobs looked at per tick for one that may fork
COLD = "cold"  # a run whose backend never forks jobs from the preloaded process (its history said why)
STARTING = "loading torch, transformers and peft once, for every job to fork from (10-15 s on an idle host)"


class WarmUnavailable(Exception):
    """The preloaded process cannot take this job; the caller launches it cold."""


def can_fork(argv: list[str], added_env: dict[str, str]) -> bool:
    """True for a job the preloaded process can run: see the module docstring."""
    return (len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] in WARM_MODULES
            and all(_read_late(name) for name in added_env))


def _read_late(name: str) -> bool:
    return name in LATE_READ_NAMES or name.startswith(LATE_READ_PREFIXES) or name.endswith(LATE_READ_SUFFIXES)


class WarmStarter:
    def __init__(self, state_dir: Path, *, clock=time.time):
        self.dir = Path(state_dir) / "warm"
        self.socket_path = str(self.dir / "sock")
        self._clock = clock
        self._proc: subprocess.Popen | None = None
        self._started_at: float | None = None
        self._cpu_s = 0.0  # the importing process's CPU time when last looked at
        self._progress_at = 0.0  # when that CPU time last grew
        self.failure: str | None = None  # why warm start is off for this engine, once known

    # ------------------------------------------------------------------ lifecycle
    @property
    def phase_path(self) -> Path:
        return self.dir / "kernels.json"

    def ensure_started(self, shapes: list[KernelShape] | None = None, kernel_env: dict[str, str] | None = None) -> None:
        """Start the process; with ``shapes``, it compiles their GPU kernels before it serves, under
        ``kernel_env`` (the jobs' Triton variables and GPU: lat_core.contract.kernel_warmup.kernel_env)."""
        if self._proc is not None or self.failure:
            return
        if len(self.socket_path) > SOCKET_PATH_MAX:
            self.failure = f"the state directory's path is too long for a Unix socket ({self.socket_path})"
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        Path(self.socket_path).unlink(missing_ok=True)
        self.phase_path.unlink(missing_ok=True)  # an earlier engine's
        with open(self.dir / "warm.log", "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "lat_core.train.warm", "--socket", self.socket_path,
                 "--parent-pid", str(os.getpid()), *self._kernel_args(shapes or [], kernel_env or {})],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._started_at = self._progress_at = self._clock()

    def _kernel_args(self, shapes: list[KernelShape], kernel_env: dict[str, str]) -> list[str]:
        if not shapes:
            return []
        write_shapes(self.dir / "kernel_shapes.json", shapes, kernel_env)
        return ["--kernel-shapes", str(self.dir / "kernel_shapes.json"), "--kernel-phase", str(self.phase_path)]

    def kernel_phase(self) -> WarmupPhase | None:
        """How the process's kernel warm-up stands (None: none, or not begun)."""
        return read_phase(self.phase_path) if self._proc is not None else None

    def status(self) -> str:
        """``off`` (never started), ``starting``, ``ready`` or ``failed`` (see :attr:`failure`)."""
        if self.failure:
            return "failed"
        if self._proc is None:
            return "off"
        if self._proc.poll() is not None:
            self.failure = (f"the preloaded process exited ({self._proc.returncode}): {self._last_log_line()}; "
                            f"see {self.dir / 'warm.log'}")
            return "failed"
        if os.path.exists(self.socket_path):
            return "ready"
        stuck = self._stuck(self._proc.pid)
        if stuck:
            self.failure = f"the preloaded process was not ready: {stuck}; see {self.dir / 'warm.log'}"
            self.stop()
            return "failed"
        return "starting"

    def _stuck(self, pid: int) -> str | None:
        """Why the importing process counts as stuck (see the module docstring), or None."""
        if self.kernel_phase() is not None:
            return self._compile_overdue()
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            return None  # it just exited: the next look reads its exit code
        cpu_s = times.user + times.system
        now = self._clock()
        if cpu_s > self._cpu_s:
            self._cpu_s, self._progress_at = cpu_s, now
        if cpu_s > READY_CPU_S:
            return f"{cpu_s:.0f} s of CPU spent importing (about 14 s when all is well)"
        if now - self._progress_at > READY_STALL_S:
            return f"it used no CPU for {READY_STALL_S:.0f} s ({self.waited_s():.0f} s after its start)"
        return None

    def _compile_overdue(self) -> str | None:
        """While its child compiles kernels the process uses no CPU itself: only a compile past the
        process's own limit (plus the imports' stall allowance) is stuck. The CPU clock restarts
        when the compile ends, so the step from there to serving is judged as imports are."""
        self._progress_at = self._clock()
        if self.waited_s() > KERNEL_WARMUP_LIMIT_S + READY_STALL_S:
            return f"still compiling GPU kernels {self.waited_s():.0f} s after its start"
        return None

    def _last_log_line(self) -> str:
        try:
            lines = (self.dir / "warm.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1][-200:] if lines else "no output"

    def waited_s(self) -> float:
        return self._clock() - (self._started_at or self._clock())

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    # ------------------------------------------------------------------ jobs
    def launch(self, argv: list[str], env: dict[str, str], job_dir: Path, exit_path: Path,
               show_env: tuple[str, ...] = ()) -> Launched:
        """Fork ``argv`` (``python -m module args``) with the engine's environment plus ``env``."""
        if self.status() != "ready":
            raise WarmUnavailable(self.failure or "the preloaded process is not ready")
        ensure_folder(exit_path.parent, job_dir)
        AttemptFiles(exit_path).clear_runner_files(job_dir)
        os.close(open_append(job_dir / TRAIN_LOG, job_dir=job_dir))  # a planted link: refused here, with why
        request = {"module": argv[2], "args": argv[3:], "cwd": str(job_dir), "log": str(job_dir / TRAIN_LOG),
                   "exit_file": str(exit_path), "show_env": ",".join(show_env),
                   "env": {**os.environ, **env, "PYTHONUNBUFFERED": "1"}}
        reply = self._ask(request)
        pid = reply.get("pid")
        if not pid:
            raise WarmUnavailable(f"the preloaded process refused the job: {reply.get('error', reply)}")
        return Launched(pid, process_start_time(pid) or 0.0, None)

    def _ask(self, request: dict) -> dict:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(15.0)
                conn.connect(self.socket_path)
                conn.sendall(json.dumps(request).encode() + b"\n")
                line = conn.makefile("r").readline()
            return json.loads(line) if line else {}
        except (OSError, ValueError) as exc:
            raise WarmUnavailable(f"cannot reach the preloaded process: {exc}") from exc


class WarmStarts:
    """The engine's use of warm start: which jobs fork, starting the preloaded process as soon as a
    run has such a job (during a countdown too), holding those jobs while it imports, forking them,
    and telling the run's and the job's history what happened."""

    def __init__(self, store, *, allowed: bool, plan_of, backend_of, clock=time.time):
        """``backend_of(run_id)``: the run's backend, which says why it never forks jobs from the
        preloaded process (``why_cold``: its jobs run on other hosts; None where it does) and the run's
        history line then (``warm_history``: a Slurm plan's warm packs say what they do)."""
        self.store, self._allowed, self._plan_of, self._backend_of = store, allowed, plan_of, backend_of
        self._clock = clock
        self._starter: WarmStarter | None = None
        self._told: dict[int, str] = {}  # run id -> the status its history last got
        self._cold: set[tuple[int, int]] = set()  # (job id, attempts) of queued jobs that cannot fork
        self._pass_status: str | None = None  # the process's status as this admission pass first read it

    def close(self) -> None:
        if self._starter is not None:
            self._starter.stop()
            self._starter = None

    def prepare(self, run) -> None:
        """Start the preloaded process as soon as one of the jobs admission reaches next may fork
        from it, and tell the run's history when it is ready or failed."""
        if self._told.get(run.id) == COLD:
            return
        if run.id in self._told and self._starter is not None:
            # the run's warm-capable jobs were found before: only a change of status is news
            self._tell(run.id, self._starter)
            return
        if self._allowed and self._plan_of(run.id).warm_start and self._backend_of(run.id).why_cold() is not None:
            self._told[run.id] = COLD  # said once: no job of the run forks from here, and why
            self.store.add_transition(run.id, None, HistoryKind.WARM_START, self._backend_of(run.id).warm_history())
            return
        # the jobs admission reaches next: a run whose first warm-capable job waits behind thousands
        # of others starts the process when that job comes near, and a tick stays cheap meanwhile
        first = self._first_warm(run.id)
        if first is None:
            return
        warm, job = first
        # compiled where and as the jobs will load them: their Triton variables, the run's first GPU
        env = {**job.env, **(run.devices[0].env if run.devices else {})}
        warm.ensure_started(run_kernel_shapes(self.store, run.id), env)
        self._tell(run.id, warm)

    def _first_warm(self, run_id: int) -> tuple[WarmStarter, JobRow] | None:
        """The preloaded process and the first of the next queued jobs that may fork from it. Jobs found to
        start cold are remembered (by attempt), so a queue of jobs that never fork costs a cheap
        query per tick, not PREPARE_LOOKAHEAD decoded rows."""
        for job_id, attempts in self.store.queued_heads(run_id, PREPARE_LOOKAHEAD):
            if (job_id, attempts) in self._cold:
                continue
            job = self.store.job(job_id)
            warm = self._for(job)
            if warm is not None:
                return warm, job
            self._cold.add((job_id, attempts))
        return None

    def _tell(self, run_id: int, warm: WarmStarter) -> None:
        """The run's history at each change: the import begins (the seconds in which no job starts
        get a line in the headless output and the TUI), then it is ready or failed."""
        status = warm.status()
        compiling = warm.kernel_phase() if status == "starting" else None
        if compiling is not None and compiling.state == "compiling":
            status = "compiling"  # its own line: the longest wait of a first run on a machine
        if status == "off" or self._told.get(run_id) == status:
            return
        self._told[run_id] = status
        if compiling is not None and status == "compiling":
            detail = f"{compiling.waiting_reason()}, once for every job"
        elif status == "starting":
            detail = STARTING
        elif status == "ready":
            detail = (f"jobs fork from a process with torch, transformers and peft imported "
                      f"(ready after {warm.waited_s():.1f}s)")
        else:
            detail = f"not used: {warm.failure}"
        self.store.add_transition(run_id, None, HistoryKind.WARM_START, detail)

    def begin_pass(self) -> None:
        """An admission pass begins: :meth:`hold` reads the process's status once for the whole pass.
        Read live, a process that got ready in the middle of a pass let a later job start while the
        earlier ones were held: it took their slot and formed a group without them."""
        self._pass_status = None

    def hold(self, job) -> str | None:
        """Why a job waits for the preloaded process: it is importing what the job would import.
        Every job of one admission pass gets the same answer (:meth:`begin_pass`)."""
        warm = self._for(job)
        if warm is None:
            return None
        if self._pass_status is None:
            self._pass_status = warm.status()
        if self._pass_status != "starting":
            return None
        phase = warm.kernel_phase()
        if phase is not None and phase.state == "compiling":
            return f"{phase.waiting_reason()}: {warm.waited_s():.0f}s"
        return f"waiting for the warm-start process to import torch, transformers, peft ({warm.waited_s():.0f}s)"

    def launch(self, job, argv: list[str], env: dict, job_dir: Path, exit_path: Path) -> Launched | None:
        """The job forked from the preloaded process, or None: then the caller starts it cold."""
        warm = self._for(job)
        if warm is None or not can_fork(argv, env) or warm.status() != "ready":
            return None
        try:
            launched = warm.launch(argv, env, job_dir, exit_path, tuple(job.env))
        except WarmUnavailable as exc:
            self.store.add_transition(job.run_id, job.id, HistoryKind.WARM_START, f"not used: {exc}")
            return None
        self.store.add_transition(job.run_id, job.id, HistoryKind.WARM_START, "forked from the preloaded process")
        return launched

    def _for(self, job) -> WarmStarter | None:
        """The preloaded process, where this job may use it: plan ``warm_start`` (default on), the
        a backend that supports it, the real launcher, one process, and variables read after import."""
        if not (self._allowed and self._plan_of(job.run_id).warm_start
                and self._backend_of(job.run_id).why_cold() is None and job.world == 1 and can_fork(job.argv, job.env)):
            return None
        if self._starter is None:
            self._starter = WarmStarter(Path(self.store.path).parent, clock=self._clock)
        return self._starter
