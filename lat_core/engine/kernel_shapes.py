"""The GPU kernel shapes of a run's queued jobs, for the warm-start process to compile before it
forks the first job (lat_core.train.kernel_warmup says why).

Only the first ``SHAPE_LOOKAHEAD`` queued jobs are read: a suite's jobs share a handful of shapes,
and a shape missed here is compiled by its job, as without a warm-up.
"""
from __future__ import annotations

from itertools import islice
from pathlib import Path

import yaml

from lat_core.config.job import JobConfig, parse_config
from lat_core.config.kernel_shapes import shapes_for
from lat_core.contract.kernel_warmup import KernelShape
from lat_core.errors import ConfigError

SHAPE_LOOKAHEAD = 256
CFG_FLAG = "--cfg"


def run_kernel_shapes(store, run_id: int) -> list[KernelShape]:
    """The shapes of the run's next queued jobs whose config loads (one that does not is left to
    fail alone, with its own message)."""
    cfgs = (_config(job) for job in islice(store.iter_queued(run_id), SHAPE_LOOKAHEAD))
    return shapes_for(cfg for cfg in cfgs if cfg is not None)


def _config(job) -> JobConfig | None:
    """The job's config as its trainer will read it (its env over its job.yaml), if it has one."""
    argv = list(job.argv)
    if CFG_FLAG not in argv[:-1]:
        return None
    path = Path(argv[argv.index(CFG_FLAG) + 1])
    try:
        return parse_config(yaml.safe_load(path.read_text()), path, environ=dict(job.env))
    except (ConfigError, OSError, yaml.YAMLError):
        return None
