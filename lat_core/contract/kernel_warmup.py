"""GPU kernel warm-up: the shapes to compile and how far the warm-up has come, as they cross processes.

Why: fla's Triton kernels are compiled and autotuned the first time a process meets a shape, and
saved in Triton's on-disk cache. Eight jobs starting at once on a fresh machine each compiled them,
each slowing the others (355 s to the SST-2 suite's first step on an H100). So one process compiles
them first (the warm-start process before it forks any job, or ``lat-tui warmup``), and the jobs
load them from the cache.

Who writes what: the engine or ``lat-tui warmup`` writes the shapes (:func:`write_shapes`), the
warm-up (:mod:`lat_core.train.kernel_warmup`) reads them and reports its phase in a small JSON file
(:func:`write_phase`), which the engine reads to tell the user why jobs wait (:func:`read_phase`).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Mapping

from lat_core.contract import kernel_tunings

PhaseState = Literal["preparing", "compiling", "done", "failed"]
TRITON_CACHE_DEFAULT = "~/.triton/cache"  # Triton's own default, per user, shared by every process
KERNELS_ENV = "LAT_KERNELS"  # a forked job's WarmupPhase.job_line(), for its started event's ``kernels``
# what decides where kernels are cached and how they are tuned, and on which GPU they compile: a
# warm-up runs under the jobs' values of these (a plan's env may point TRITON_CACHE_DIR elsewhere)
# (and the seeded configs: kernel_tunings.SWITCH is also its _DIR variable's prefix)
KERNEL_ENV_PREFIXES = ("TRITON_", "FLA_", "TORCHINDUCTOR_", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                       kernel_tunings.SWITCH)


@dataclass(frozen=True)
class KernelShape:
    """One model's layer at the widths and rows its jobs train with: what the warm-up runs once.

    ``tiny`` holds the sizes of a tiny-random model (empty for a checkpoint, whose config.json has
    them); ``rows`` is the micro-batch's rows, ``widths`` the row widths it is padded to; ``eager``:
    its jobs' steps are not graphed, so they train on left-padded (or packed) rows that fla unpads to
    variable lengths, whose kernels autotune under keys of their own (the int32 ``cu_seqlens``)."""
    family: str
    name_or_path: str
    tiny: tuple[tuple[str, int | str | float | bool], ...]
    dtype: str
    fused_swiglu: bool
    rows: int
    widths: tuple[int, ...]
    eager: bool = False

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "tiny": dict(self.tiny), "widths": list(self.widths)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> KernelShape:
        tiny = data["tiny"]
        widths = data["widths"]
        if not isinstance(tiny, dict) or not isinstance(widths, list):
            raise ValueError(f"a kernel shape needs a tiny mapping and a widths list: {data}")
        return cls(str(data["family"]), str(data["name_or_path"]), tuple(sorted(tiny.items())),
                   str(data["dtype"]), bool(data["fused_swiglu"]), int(str(data["rows"])),
                   tuple(int(w) for w in widths), data.get("eager") is True)

    def describe(self) -> str:
        """``gla tiny-random float32, 8 rows[, eager]`` (what the warm-up prints per shape)."""
        return f"{self.family} {self.name_or_path} {self.dtype}, {self.rows} rows" + (", eager" if self.eager else "")


def widths_phrase(widths: tuple[int, ...] | list[int]) -> str:
    """``16-, 32-, 64-token rows``: the widths a message names, smallest first."""
    ordered = sorted(set(widths))
    if not ordered:
        return "no rows"
    return ", ".join(f"{w}-" for w in ordered[:-1]) + (", " if len(ordered) > 1 else "") + f"{ordered[-1]}-token rows"


def kernel_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that a warm-up must share with the jobs (KERNEL_ENV_PREFIXES)."""
    return {k: v for k, v in environ.items() if k.startswith(KERNEL_ENV_PREFIXES)}


def write_shapes(path: Path, shapes: list[KernelShape], env: Mapping[str, str] | None = None) -> None:
    """The shapes to compile and the jobs' kernel variables (:func:`kernel_env`) to compile under."""
    path.write_text(json.dumps({"shapes": [s.to_json() for s in shapes], "env": kernel_env(env or {})}))


def read_shapes(path: Path) -> tuple[list[KernelShape], dict[str, str]]:
    """The shapes and variables a file holds; ValueError names the file when it holds something else."""
    try:
        data = json.loads(path.read_text())
        env = data["env"]
        if not isinstance(data["shapes"], list) or not isinstance(env, dict):
            raise ValueError("expected shapes (a list) and env (a mapping)")
        return [KernelShape.from_json(item) for item in data["shapes"]], kernel_env(env)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a file of kernel shapes: {exc}") from exc


@dataclass(frozen=True)
class WarmupPhase:
    """How the warm-up stands: ``preparing`` (begun: importing fla, finding the GPU), ``compiling``
    (``widths``: every width of the shapes),
    ``done`` (``seconds`` it took; ``cached`` when every shape was there already) or ``failed``
    (``why``; jobs then compile for themselves, as without a warm-up)."""
    state: PhaseState
    widths: tuple[int, ...] = ()
    seconds: float = 0.0
    cached: bool = False
    why: str = ""

    def job_line(self) -> str:
        """What a forked job's log says about its kernels."""
        if self.state == "failed":
            return f"kernels: not warmed ({self.why}); this job compiles what it needs"
        if self.state in ("preparing", "compiling"):
            return "kernels: still compiling in the preload process"
        if self.why:
            return f"kernels: {self.why}"
        if self.cached:
            return "kernels: cached (Triton's cache held every shape)"
        return f"kernels: warmed in the preload process in {self.seconds:.0f} s"

    def waiting_reason(self) -> str:
        return f"compiling GPU kernels for {widths_phrase(self.widths)} (first run on this machine)"


def write_phase(path: Path, phase: WarmupPhase) -> None:
    """Replaced whole (a reader never sees half a file)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({**asdict(phase), "widths": list(phase.widths)}))
    os.replace(tmp, path)


def read_phase(path: Path) -> WarmupPhase | None:
    """The phase last written, or None: no warm-up there (yet), or a file this LAT cannot read."""
    try:
        data = json.loads(path.read_text())
        return WarmupPhase(data["state"], tuple(int(w) for w in data["widths"]), float(data["seconds"]),
                           bool(data["cached"]), str(data["why"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def triton_cache_dir(environ: Mapping[str, str]) -> Path:
    """Where Triton keeps compiled kernels for a process with this environment: TRITON_CACHE_DIR, or
    Triton's per-user default. Jobs, the warm-start process and ``lat-tui warmup`` all inherit the
    user's environment, so they share it (a per-process temporary directory would compile again)."""
    return Path(environ.get("TRITON_CACHE_DIR") or TRITON_CACHE_DEFAULT).expanduser()
