"""``lat-tui warmup``: compile a plan's GPU kernels ahead of time (lat_core.train.kernel_warmup),
so that the run's first step does not wait for Triton, and the shapes it computes from a plan.

The compile runs in a child process with the trainer's stack (the front end never imports torch);
it shares the user's Triton cache with the jobs (lat_core.contract.kernel_warmup.triton_cache_dir).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from lat_core.config.env import shell_overrides
from lat_core.config.kernel_shapes import shapes_for
from lat_core.config.suites import SuiteRegistry
from lat_core.contract.kernel_warmup import KernelShape, write_shapes
from lat_core.front.plan import Plan

WARMUP_MODULE = "lat_core.train.kernel_warmup"


def plan_kernel_shapes(plan: Plan, registry: SuiteRegistry | None = None,
                       environ: Mapping[str, str] | None = None) -> list[KernelShape]:
    """The kernel shapes of every job of the plan, with the launching shell's variables (``environ``,
    default this process's) laid over its configs as a run's are; ConfigError names a config that
    does not load or a shell variable that does not parse (before a compile of many minutes)."""
    from lat_core.front.jobs import expand

    shell = shell_overrides(os.environ if environ is None else environ)
    jobs = expand(plan, plan.suite_registry(registry), shell)
    return shapes_for(job.typed for job in jobs if job.typed is not None)


def warm_up_kernels(shapes: list[KernelShape], gpu: int | None = None, plan_env: Mapping[str, str] | None = None,
                    save_tunings: bool = False) -> int:
    """Compile ``shapes`` on GPU ``gpu`` (by PCI bus order, as NVML numbers them; None: the first
    CUDA sees) under the plan's Triton variables (where its jobs will look for the kernels), its
    lines on this process's stdout; the child's exit code. ``save_tunings``: autotune every kernel
    (no table seeds it) and add the winners to this GPU model's table (lat_core.train.tuned_kernels)."""
    env = {**os.environ, **(plan_env or {})}
    if gpu is not None:
        env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(gpu))
    flags = ["--save-tunings"] if save_tunings else []
    with tempfile.TemporaryDirectory(prefix="lat-warmup-") as folder:
        path = Path(folder) / "shapes.json"
        write_shapes(path, shapes, env)
        return subprocess.run([sys.executable, "-m", WARMUP_MODULE, "--shapes", str(path), *flags], env=env,
                              stdin=subprocess.DEVNULL, check=False).returncode
