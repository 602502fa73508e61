"""Warm start: a process that imports the training stack once and forks each job from it.

    python -m lat_core.train.warm --socket PATH --parent-pid PID [--kernel-shapes F --kernel-phase F]

Why: a short LoRA job spends much of its life importing torch, transformers and peft (about 13 s
of a cold start on an H200 host, more when several jobs import at once). This process pays that
once per engine; each job is then a fork that starts training at once.

What it never does: initialise CUDA (a forked child cannot use a CUDA context its parent made), so
fla, which queries the GPU when imported, is imported by each job itself. It asserts this before
it serves. The engine's environment is the one imported under; a job's own variables are set in
its child, and the engine sends here only jobs whose variables are read after import (see
:mod:`lat_core.engine.warm`).

GPU kernels: given the run's kernel shapes, it compiles them once before it serves, in a forked
child (which may use CUDA, as this process may not): :mod:`lat_core.train.kernel_warmup`. The jobs
then load them from Triton's cache, and each job's log says how its kernels came.

Per request (one JSON line on the Unix socket): fork a child that becomes the job's runner (own
session, stdio appended to train.log, cwd the job dir, the job's environment, the runner's header
and pid file), which forks the trainer and then execs ``python -m lat_core.runner --wait-pid``:
a fresh small runner that waits for its child, stops what the job left running and writes the exit
record, exactly as a cold launch's runner does; the trainer is contained the same way too (its own
cgroup, or the runner as subreaper: :mod:`lat_core.containment`). The reply is the runner's pid.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
import traceback
import warnings
from pathlib import Path

from lat_core.contract.kernel_warmup import KERNELS_ENV, WarmupPhase, read_phase, read_shapes, write_phase
from lat_core.safe_files import open_append

from lat_core.titles import set_title

# Imported here, before any fork, so every job inherits them: the point of this process.
PRELOAD = ("torch", "transformers", "transformers.trainer", "peft", "tokenizers", "yaml",
           "lat_core.train.loop", "lat_core.train.pretrain_loop")
# Pure-Python imports of fla's GLA modules. (Not torch._inductor, which fla's activations also
# import: importing it queries the GPU, and a fork after that cannot use CUDA; measured on an H200.)
PRELOAD_IF_PRESENT = ("einops",)
IDLE_EXIT_S = 600.0  # nobody asked for a job this long, and none is running: go away
KERNEL_WARMUP_LIMIT_S = 1200.0  # lat_core.engine.warm's: only a hang takes this long
KERNEL_POLL_S = 0.5
PR_SET_PDEATHSIG = 1  # linux/prctl.h
kernel_phase: WarmupPhase | None = None  # how the warm-up before serving went: each job's log says


class PreloadTouchedCuda(RuntimeError):
    """Something imported used CUDA, so no forked child could; jobs then start cold."""


def preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    for name in PRELOAD_IF_PRESENT:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    check_fork_can_use_cuda()


def check_fork_can_use_cuda() -> None:
    """A forked child must be able to initialise CUDA. torch marks every child of a process that
    has asked the CUDA runtime anything (even a device count) as a "bad fork" that cannot; so ask
    one child, rather than trust that no library asks at import time."""
    import torch

    if torch.cuda.is_initialized():
        raise PreloadTouchedCuda("CUDA was initialised while preloading")
    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise PreloadTouchedCuda("a library queried CUDA while preloading; a forked job could not use the GPU")


def serve(path: str, parent_pid: int) -> None:
    listener = _listen(path)
    signal.signal(signal.SIGTERM, _stop)  # the engine's stop: leave no socket behind
    children: set[int] = set()
    last_request = time.time()
    try:
        while os.getppid() == parent_pid:
            _reap(children)
            if not children and time.time() - last_request > IDLE_EXIT_S:
                break
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            last_request = time.time()
            with conn:
                pid = _handle(conn, listener)
                if pid:
                    children.add(pid)
    finally:
        listener.close()
        os.unlink(path)


def _stop(_signum, _frame):
    raise SystemExit(0)


def _listen(path: str) -> socket.socket:
    """Bind only once everything is imported: the socket's existence means "ready". The directory
    is the engine's (0700), so only its user can ask this process to run anything."""
    tmp = f"{path}.{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(tmp)
    listener.listen(64)
    os.replace(tmp, path)
    listener.settimeout(1.0)
    return listener


def _reap(children: set[int]) -> None:
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.discard(pid)


def _handle(conn: socket.socket, listener: socket.socket) -> int | None:
    conn.settimeout(10.0)
    try:
        request = json.loads(conn.makefile("r").readline())
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            become_runner(request)  # never returns
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        return pid
    except (OSError, ValueError, KeyError) as exc:
        print(f"[warm] bad request: {exc}", file=sys.stderr, flush=True)
        try:
            conn.sendall(json.dumps({"error": str(exc)}).encode() + b"\n")
        except OSError:
            pass
        return None


def become_runner(request: dict) -> None:
    """In the forked child: take the job's session, files and environment; fork the trainer; then
    exec a fresh runner to wait for it (small and import-free, like a cold launch's). A warm pack's
    process (lat_core.train.pack) forks its members through this too."""
    code = 70
    try:
        os.setsid()
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _redirect_stdio(request["log"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from lat_core.runner import detached as runner
        from lat_core.containment import enter

        started = time.time()
        containment = runner.start_containment(request["exit_file"], started)
        if containment is None:
            os._exit(2)  # the reason is in the log and the exit record; nothing was started
        runner.write_pid_file(request["exit_file"], containment, rss_at_fork=runner.own_rss())
        runner._echo([sys.executable, "-m", request["module"], *request["args"]], request.get("show_env", ""))
        print("[lat] warm start: forked from the preloaded process", flush=True)
        if kernel_phase is not None:
            print(f"[lat] {kernel_phase.job_line()}", flush=True)
            os.environ[KERNELS_ENV] = kernel_phase.job_line().removeprefix("kernels: ")
        print(f"[lat] containment: {containment.describe()}", flush=True)
        os.environ.update(containment.child_env())
        # SIGUSR1 (Slurm's warning, forwarded here by a warm pack) held from now until the exec'd runner
        # catches it: an exec resets the handler, and the warning in that window was the runner's death
        # (its trainer orphaned, never told). Held, it stays pending across the exec and reaches the runner.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        trainer = os.fork()
        if trainer == 0:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})  # the trainer's own handler takes it
            enter(containment)
            _run_trainer(request["module"], request["args"])  # never returns
        os.execv(sys.executable, [sys.executable, "-m", "lat_core.runner", "--exit-file", request["exit_file"],
                                  "--wait-pid", str(trainer), "--started", repr(started),
                                  "--containment", json.dumps(containment.to_json()),
                                  # what it waits for, as a cold launch's runner is told: its title
                                  "--", sys.executable, "-m", request["module"], *request["args"]])
    except BaseException:
        traceback.print_exc()
    os._exit(code)


def _redirect_stdio(log_path: str) -> None:
    """Like a cold launch: stdin from /dev/null, stdout and stderr appended to train.log, unbuffered
    (PYTHONUNBUFFERED), so nothing is lost when the process is killed."""
    import io

    null = os.open(os.devnull, os.O_RDONLY)
    log = open_append(Path(log_path))  # never through a planted symlink (lat_core.safe_files)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True,
                                  errors="backslashreplace")


def _run_trainer(module: str, args: list[str]) -> None:
    """``python -m module args`` in this already-importing process, with the interpreter's exit
    semantics: the exit code of SystemExit, 1 and a traceback for an exception, death by SIGINT
    for an uncaught KeyboardInterrupt; atexit handlers run, as at a normal interpreter exit."""
    import atexit
    import runpy

    code = 1
    try:
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        atexit._run_exitfuncs()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
    atexit._run_exitfuncs()
    os._exit(code)


def _exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def warm_kernels_in_child(shapes_path: Path, phase_path: Path, limit_s: float = KERNEL_WARMUP_LIMIT_S,
                          warm=None) -> WarmupPhase:
    """Compile the shapes' kernels in a forked child (this process must not touch CUDA), waiting at
    most ``limit_s``; never raises: a failure is a phase that says why, and jobs compile their own.
    ``warm(shapes, phase_path)`` is kernel_warmup.warm_kernels unless given."""
    started = time.time()
    write_phase(phase_path, WarmupPhase("preparing"))  # the engine now waits for the compile, not the imports
    pid = os.fork()
    if pid == 0:
        _die_with_parent()
        _warm_kernels_then_exit(shapes_path, phase_path, warm)
    done: tuple[int, int] = (0, 0)
    try:
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.time() - started < limit_s:
            time.sleep(KERNEL_POLL_S)
    finally:  # past the limit, or this process told to stop (SIGTERM: _stop) meanwhile
        if not done[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if not done[0]:
        return _failed(phase_path, started, f"still compiling after {limit_s:.0f} s: stopped")
    phase = read_phase(phase_path)
    if phase is None or phase.state in ("preparing", "compiling"):
        return _failed(phase_path, started, f"the warm-up process exited ({os.waitstatus_to_exitcode(done[1])}); "
                                            "see warm.log")
    return phase


def _die_with_parent() -> None:
    """The compiling child goes when this process goes, even by SIGKILL (the engine's last resort)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # Linux; elsewhere the engine's stop still ends it


def _failed(phase_path: Path, started: float, why: str) -> WarmupPhase:
    phase = WarmupPhase("failed", seconds=time.time() - started, why=why)
    write_phase(phase_path, phase)
    print(f"[warm] kernel warm-up failed: {why}", flush=True)
    return phase


def _warm_kernels_then_exit(shapes_path: Path, phase_path: Path, warm) -> None:
    code = 1
    try:
        if warm is None:
            from lat_core.train.kernel_warmup import warm_kernels as warm
        shapes, env = read_shapes(shapes_path)
        os.environ.update(env)  # the jobs' Triton cache and GPU: only this child compiles under them
        warm(shapes, phase_path)
        code = 0
    except BaseException:
        traceback.print_exc()
    sys.stdout.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lat_core.train.warm")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--parent-pid", type=int, required=True, help="exit when this process (the engine) is gone")
    parser.add_argument("--kernel-shapes", type=Path, help="compile these GPU kernel shapes before serving")
    parser.add_argument("--kernel-phase", type=Path, help="where the kernel warm-up reports its phase")
    args = parser.parse_args(argv)
    set_title(f"lat warm: {args.socket}")
    # The only threads are torch's and peft's idle native helpers, the same state DataLoader's
    # fork workers start from; Python 3.12 warns about any fork of a multi-threaded process.
    warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks", category=DeprecationWarning)
    started = time.time()
    try:
        preload()
    except PreloadTouchedCuda as exc:
        print(f"[warm] not usable: {exc}", flush=True)
        return 3
    print(f"[warm] preloaded {', '.join(PRELOAD)} in {time.time() - started:.1f}s", flush=True)
    if args.kernel_shapes and args.kernel_phase:
        global kernel_phase
        signal.signal(signal.SIGTERM, _stop)  # the engine's stop ends the compile too (its finally)
        kernel_phase = warm_kernels_in_child(args.kernel_shapes, args.kernel_phase)
    serve(args.socket, args.parent_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
