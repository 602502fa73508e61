"""The preflight: what cannot work is refused before anything starts (exit 2, every problem listed,
the way a bad plan is), instead of every job failing alike one after the other.

Three checks, each cheap (config, file and cache look-ups, sizes from the config, at most one short
HEAD request to the hub; never a model load, never torch):

- a model too big for the CPU on a run that is on the CPU (lat_core.config.gpu_need);
- a model or dataset that is neither local nor in the Hugging Face caches while the hub is off
  (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` in the job's environment) or does not answer;
  the tokenizer comes from the model's own folder or repository (lat_core.train.models), so the
  model's check covers it;
- a job whose estimated peak (lat_core.config.memory_prior, the prior admission uses) is more than
  any of the run's devices has: it would wait in the queue for ever.

Called from run creation (:func:`lat_core.front.service.prepare_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lat_core.config.gpu_need import cpu_problem, params_from_name
from lat_core.config.hub_cache import LOCAL_DIR_VARS, dataset_cached, hub_dataset, hub_id, hub_unreachable, offline_vars
from lat_core.config.job import TINY, JobConfig
from lat_core.config.train_args import missing_module
from lat_core.config.user_data import DataSpec, columns_problem
from lat_core.config.memory_prior import (GiB, PriorUnknown, cached_snapshot, estimate, model_facts,
                                          safetensors_params)
from lat_core.contract.devices import Device
from lat_core.errors import PlanError
from lat_core.front.plan_problems import SHOWN, bounded
from lat_core.monitor.gpu import GpuSnapshot

HubProbe = Callable[[Mapping[str, str]], "str | None"]


class PreflightError(PlanError):
    title = "The run cannot work"


@dataclass(frozen=True)
class Target:
    """What the jobs will run on: the run's devices, their memory, the host's RAM (0: not known)."""
    devices: list[Device]
    gpus: GpuSnapshot
    host_ram: int
    allow_cpu: bool


@dataclass(frozen=True)
class Job:
    """The preflight's view of one job: its name, typed config and the environment it will see."""
    key: str
    cfg: JobConfig
    environ: Mapping[str, str]


def check(jobs: Iterable[Job], target: Target, probe: HubProbe | None = None) -> None:
    """PreflightError listing every problem (one line per problem that several jobs share).
    ``probe``: whether the hub answers (default: a short HEAD request; tests pass their own)."""
    found: dict[str, list[str]] = {}
    hub = HubState(probe or hub_unreachable)
    for job in jobs:
        for problem in job_problems(job, target, hub):
            found.setdefault(problem, []).append(job.key)
    if found:
        raise PreflightError(bounded([_line(problem, keys) for problem, keys in found.items()]), where="preflight")


def job_problems(job: Job, target: Target, hub: HubState) -> list[str]:
    problems = [hub.problem(what, job.environ) for what in hub_needs(job.cfg, job.environ)]
    problems += own_pieces_problems(job.cfg, job.environ)
    if all(d.is_cpu for d in target.devices) and not target.allow_cpu:
        problems.append(_cpu_problem(job.cfg, job.environ))
    problems.append(memory_problem(job.cfg, job.environ, target))
    return [p for p in problems if p]


def _line(problem: str, keys: list[str]) -> str:
    shown = ", ".join(keys[:SHOWN]) + (f" ... ({len(keys) - SHOWN:,} more)" if len(keys) > SHOWN else "")
    return f"{problem} [job{'s' if len(keys) > 1 else ''} {shown}]"


# ----------------------------------------------------------------------------- the CPU

def model_params(cfg: JobConfig, environ: Mapping[str, str]) -> int | None:
    """The base model's parameter count from its config or files, else from its name; None unknown."""
    try:
        return model_facts(cfg, environ).params  # GLA: model.tiny, or the checkpoint's config and files
    except (PriorUnknown, OSError, ValueError):
        pass
    if cfg.model.name_or_path == TINY:
        return None  # a tiny Mamba: small by construction
    folder = _model_folder(cfg.model.name_or_path, environ)
    stored = safetensors_params(folder) if folder is not None else None
    return stored if stored is not None else params_from_name(cfg.model.name_or_path)


def _cpu_problem(cfg: JobConfig, environ: Mapping[str, str]) -> str | None:
    params = model_params(cfg, environ)
    return None if params is None else cpu_problem(f"model {cfg.model.name_or_path}", params, cfg.model.dtype)


# ----------------------------------------------------------------------------- the hub

def _model_folder(name: str, environ: Mapping[str, str]) -> Path | None:
    local = Path(name).expanduser()
    return local if local.is_dir() else cached_snapshot(name, environ)


def hub_needs(cfg: JobConfig, environ: Mapping[str, str]) -> list[str]:
    """What this job would fetch from the hub: ``model X`` / ``dataset ID (config)``, each with
    neither a local copy nor a cached one."""
    needs = []
    name = cfg.model.name_or_path
    if name != TINY and _model_folder(name, environ) is None:
        needs.append(f"model {name} (a local copy: a folder as model.name_or_path)")
    if isinstance(cfg.data, DataSpec):
        return needs + _own_data_need(cfg.data, environ)
    found = hub_dataset(cfg.data)
    if found is not None:
        family, config = found
        local = environ.get(LOCAL_DIR_VARS[family]) or cfg.data_dir
        repo = hub_id(family, environ)
        if not local and not dataset_cached(repo, config, environ):
            needs.append(f"dataset {cfg.data} ({repo}{' ' + config if config else ''}; a local copy: "
                         f"{LOCAL_DIR_VARS[family]} or data_dir)")
    return needs


def _own_data_need(spec: DataSpec, environ: Mapping[str, str]) -> list[str]:
    """A user's dataset given by hub id (a local path was checked when the config was read)."""
    if Path(spec.path).is_absolute() or dataset_cached(spec.path, spec.config, environ):
        return []
    return [f"dataset {spec.path}{' ' + spec.config if spec.config else ''} (data.path; a local copy: a file "
            "or a save_to_disk folder as data.path)"]


def own_pieces_problems(cfg: JobConfig, environ: Mapping[str, str]) -> list[str]:
    """What the user brings that cannot work, found without importing it: a callback's module not on
    the job's Python path, a column a local data file lacks (lat_core.config.train_args, user_data)."""
    problems = [missing_module(path, environ) for path in cfg.train.callbacks]
    if isinstance(cfg.data, DataSpec):
        problems.append(columns_problem(cfg.data))
    return [p for p in problems if p]


class HubState:
    """Whether the hub can serve what is not here: offline flags per job, one probe per run (and
    only when some job needs the hub)."""

    def __init__(self, probe: HubProbe):
        self._probe = probe
        self._probed: dict[str, str | None] = {}

    def problem(self, what: str, environ: Mapping[str, str]) -> str | None:
        flags = offline_vars(environ)
        if flags:
            return f"{what} is not in the Hugging Face cache and {'/'.join(flags)} is set: fill the cache " \
                   "on a machine online, or use a local copy"
        endpoint = environ.get("HF_ENDPOINT", "")
        if endpoint not in self._probed:
            self._probed[endpoint] = self._probe(environ)
        down = self._probed[endpoint]
        if down is None:
            return None
        return f"{what} is not in the Hugging Face cache, and the hub is unreachable: {down}"


# ----------------------------------------------------------------------------- memory

def memory_problem(cfg: JobConfig, environ: Mapping[str, str], target: Target) -> str | None:
    """A job whose estimated peak exceeds every device of the run could never be admitted."""
    try:
        prior = estimate(cfg, environ)
    except (PriorUnknown, OSError, ValueError, KeyError):
        return None  # not estimated: admission measures it (staggered starts)
    on_cpu = [d for d in target.devices if d.is_cpu]
    if on_cpu:
        need, have, where = prior.cpu_job_rss, target.host_ram, "the host's RAM"
    else:
        sizes = [g.memory_total for d in target.devices
                 if d.index is not None and (g := target.gpus.by_index(d.index)) is not None]
        if not sizes:
            return None
        need, have, where = prior.gpu_bytes, max(sizes), "the largest GPU of the run"
    if not have or need <= have:
        return None
    return (f"estimated peak {need / GiB:.1f} GiB is more than {where} ({have / GiB:.1f} GiB): a smaller "
            "train.batch_size or max_seq_len, train.gradient_checkpointing: true, or a bigger device")
