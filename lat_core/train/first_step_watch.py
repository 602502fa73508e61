"""Says in the job's log what the trainer is doing while its first step is late, so a long compile is
shown as one and not as a silent hang (issue 26).

Why: the kernel warm-up compiles the shapes the engine knows a job will use, but a job can still meet
a shape it did not (a packed row, a warm-up that failed, an evaluation's kernel variant). Then Triton
compiles and autotunes fla's kernels inside the job, minutes on a fresh machine, and until then the
job's log ended at "started ...". On a GPU (2026-11-26, bench/RESULTS.md) eight packed eager jobs sat
150 s like that, with nothing to tell a compile from a hang.

How: a daemon thread samples every thread's stack (``sys._current_frames``, as py-spy would from
outside) while no step has been taken: a backward pass runs in autograd's device thread, where its
kernels autotune while the main thread waits in ``_engine_run_backward`` (seen on an H100,
2026-11-27: "the trainer is in _engine_run_backward" for minutes of autotuning). Inside Triton's
autotuner it says "autotuning", inside its compiler "compiling", naming the innermost fla function
(the kernel's caller, e.g. ``chunk_fwd_h``).
Anything else is only reported once the wait is long (``quiet_s``), with the function and line the
main thread is in. Stdlib only: it runs beside the training stack and imports none of it.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Callable

AUTOTUNER = "/triton/runtime/autotuner.py"
COMPILER = "/triton/compiler/"
BACKEND_COMPILER = ("/triton/backends/", "/compiler.py")  # e.g. nvidia/compiler.py's make_llir; not driver.py's launches
JIT = "/triton/runtime/jit.py"
FLA = ("/fla/ops/", "/fla/modules/", "/fla/layers/")
FLA_AUTOTUNE_WRAPPER = "/fla/ops/utils/cache.py"  # its ``run`` is no kernel's caller: name the one above it
AFTER_S, EVERY_S, QUIET_S = 20.0, 30.0, 120.0  # the first line's wait, between lines, before "other" is said


@dataclass(frozen=True)
class Doing:
    """What a thread was found doing: ``kind`` autotuning, compiling or other; ``where`` the fla
    function that asked for the kernel (autotuning, compiling) or the innermost frame (other)."""
    kind: str
    where: str

    def line(self, waited_s: float) -> str:
        if self.kind == "other":
            return f"[lat] no step after {waited_s:.0f} s; the trainer is in {self.where}"
        what = "autotuning" if self.kind == "autotuning" else "compiling"
        return (f"[lat] no step after {waited_s:.0f} s: Triton is {what} GPU kernels ({self.where}), as for a "
                "shape this machine's Triton cache does not hold yet; later jobs load them from it")


def _path(frame: FrameType) -> str:
    return frame.f_code.co_filename.replace("\\", "/")


def _compiling(frame: FrameType, path: str) -> bool:
    backend, file = BACKEND_COMPILER
    return (COMPILER in path or (backend in path and path.endswith(file))
            or (path.endswith(JIT) and frame.f_code.co_name == "_do_compile"))


def doing(frame: FrameType | None) -> Doing | None:
    """Classifies a thread's stack from its innermost ``frame``; None without one."""
    if frame is None:
        return None
    innermost, kind, fla_caller = frame, "other", None
    while frame is not None:
        path = _path(frame)
        if path.endswith(AUTOTUNER):
            kind = "autotuning"
        elif kind == "other" and _compiling(frame, path):
            kind = "compiling"
        if fla_caller is None and any(part in path for part in FLA) and not path.endswith(FLA_AUTOTUNE_WRAPPER):
            fla_caller = frame.f_code.co_name
        frame = frame.f_back
    if kind == "other":
        return Doing("other", f"{innermost.f_code.co_name} ({_path(innermost).rsplit('/', 1)[-1]}:{innermost.f_lineno})")
    return Doing(kind, f"fla {fla_caller}" if fla_caller else "outside fla")


def busiest(frames: dict[int, FrameType], main: int | None, skip: int | None = None) -> Doing | None:
    """What the trainer is doing, from every thread's innermost frame: a Triton autotune or compile in
    any thread (autotuning first), else what the ``main`` thread is in; ``skip``: the watch's own."""
    found = [d for ident, frame in frames.items() if ident != skip and (d := doing(frame)) is not None]
    for kind in ("autotuning", "compiling"):
        hit = next((d for d in found if d.kind == kind), None)
        if hit is not None:
            return hit
    return doing(frames.get(main or 0))


class FirstStepWatch:
    """``with FirstStepWatch(stepped, log):`` around training. Every ``every_s`` from ``after_s`` on,
    until ``stepped()`` is true or the block ends, logs what the trainer is doing (:func:`busiest`): a compile or
    autotune at once, anything else only past ``quiet_s`` and then every ``quiet_s``."""

    def __init__(self, stepped: Callable[[], bool], log: Callable[[str], None], *, after_s: float | None = None,
                 every_s: float | None = None, quiet_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._stepped, self._log, self._clock = stepped, log, clock
        self._after_s = AFTER_S if after_s is None else after_s
        self._every_s = EVERY_S if every_s is None else every_s
        self._quiet_s = QUIET_S if quiet_s is None else quiet_s
        self._main = threading.main_thread().ident
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="lat-first-step-watch", daemon=True)

    def __enter__(self) -> FirstStepWatch:
        self._t0 = self._clock()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        last_other = 0.0
        wait = self._after_s
        while not self._done.wait(wait):
            wait = self._every_s
            if self._stepped():
                return
            found = busiest(sys._current_frames(), self._main, threading.get_ident())
            waited = self._clock() - self._t0
            if found is None or (found.kind == "other" and (waited < self._quiet_s or waited - last_other < self._quiet_s)):
                continue
            if found.kind == "other":
                last_other = waited
            try:
                self._log(found.line(waited))
            except Exception:   # a full disk or a closed log must not end training through this thread
                return
