"""Run a finished (or failed) job again from its folder, into a new folder: ``lat-tui rerun``.

What makes it the same job: the resolved config of its job.yaml (seed and dataset included), the
seeds' variables of its command.json env (values masked there, i.e. secrets, come from the caller's
environment) and its process count. A job folder is input from anyone who can write to the output
root, so nothing from it runs as code: other saved variables (PYTHONPATH, LD_PRELOAD, PATH, ...)
are dropped unless named in ``keep_env``. Nothing is written until every check passed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from lat_core.config.env import MASK, shell_overrides
from lat_core.config.job import TrainConfigError, parse_config
from lat_core.config.yaml_files import YamlMapping
from lat_core.contract import kernel_tunings
from lat_core.contract.jobdir import JobDir
from lat_core.contract.jobdir.names import COMMAND, JOB_YAML, OVERRIDES
from lat_core.front.devices import resolve_devices
from lat_core.errors import ConfigError, OutputPathError, PlanError
from lat_core.front.jobs import JobSpec, safe_component
from lat_core.monitor.gpu import GpuProbe
from lat_core.front.plan import Pair, Plan, SuiteRef
from lat_core.safe_files import check_output_root
from lat_core.front.preflight import HubProbe
from lat_core.front.service import PreparedRun, preflight_jobs

SUITE = "rerun"   # the suite name the new run files the job under
T = TypeVar("T")


@dataclass
class RerunEnv:
    """The rerun's env, and what the caller should hear about the folder's saved one."""

    env: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)   # masked (secret) names not in the caller's env
    dropped: list[str] = field(default_factory=list)   # saved names that are not seeds' variables


def _read_json(path: Path, expected: type[T], default: T) -> T:
    """The file's JSON value; ``default`` when there is no such file, ConfigError naming the file
    when it is unreadable or not of the ``expected`` type."""
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        raise ConfigError(f"not readable JSON ({type(exc).__name__})", where=str(path)) from None
    if not isinstance(value, expected):
        raise ConfigError(f"expected a JSON {expected.__name__}, got {type(value).__name__}", where=str(path))
    return value


def _read_job_yaml(path: Path) -> object:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"no readable job.yaml ({exc.strerror}); is this a job folder?", where=str(path.parent)) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text (a binary file?); expected the job's resolved YAML config",
                          where=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML ({str(exc).splitlines()[0]})", where=str(path)) from None


def resolved_config(job_dir: Path) -> YamlMapping:
    """The job's resolved config, as the engine wrote it into job.yaml."""
    path = job_dir / JOB_YAML
    config = _read_job_yaml(path)
    if not isinstance(config, dict):
        raise ConfigError(f"expected a mapping of config fields, got {type(config).__name__}", where=str(path))
    if config.get("resolved") is not True:
        raise ConfigError("field 'resolved': expected true (LAT writes it when it plans a job); this job.yaml was "
                          "not written by LAT's planner, so it is not the config the job ran with: rerun a job "
                          "that LAT started", where=str(path))
    seed, data = config.get("seed"), config.get("data")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"field 'seed': expected an integer, got {seed!r}", where=str(path))
    if not dataset_name(data):
        raise ConfigError(f"field 'data': expected a dataset name, got {data!r}", where=str(path))
    return config


def dataset_name(data: object) -> str:
    """A job.yaml's dataset name: ``data`` itself, or the ``name`` of a dataset named by its columns
    (the plan's ``datasets``); "" when it has none."""
    name = data.get("name") if isinstance(data, dict) else data
    return name.strip() if isinstance(name, str) else ""


def job_env(job_dir: Path, environ: dict[str, str], keep: tuple[str, ...] = ()) -> RerunEnv:
    """command.json's env: the seeds' variables (and the ``keep`` names) as saved, masked values taken
    from ``environ``; every other saved name dropped."""
    saved = _read_json(job_dir / COMMAND, dict, {}).get("env") or {}
    if not isinstance(saved, dict):
        raise ConfigError(f"field 'env': expected a mapping, got {type(saved).__name__}",
                          where=str(job_dir / COMMAND))
    unknown = [name for name in keep if name not in saved]
    if unknown:
        raise ConfigError(f"--keep-env {','.join(unknown)}: not in the job's saved env "
                          f"(it holds {', '.join(sorted(saved)) or 'nothing'})", where=str(job_dir / COMMAND))
    seeds = shell_overrides(saved)
    out = RerunEnv()
    for name, value in saved.items():
        if value == MASK:       # a secret: the caller's own value, never the folder's
            _take_secret(out, name, environ)
        elif name in seeds or name in keep:
            out.env[name] = str(value)
        else:
            out.dropped.append(name)
    problems = kernel_tunings.problems(out.env)  # the job's trainer would only log one and autotune
    if problems:
        raise ConfigError(f"field 'env.{problems[0].name}': {problems[0]}", where=str(job_dir / COMMAND))
    return out


def _take_secret(out: RerunEnv, name: str, environ: dict[str, str]) -> None:
    if environ.get(name):
        out.env[name] = environ[name]
    else:
        out.missing.append(name)


def default_output_root(job_dir: Path) -> Path:
    """``<the job's output root>-rerun-<time>``: beside the original root, so results tables of the
    original root do not mix the rerun in."""
    return job_dir.parent.parent.with_name(f"{job_dir.parent.parent.name}-rerun-{time.strftime('%Y%m%d-%H%M%S')}")


def prepare_rerun(job_dir: Path, output_root: Path | None = None, gpus: str | list[int] | None = None,
                  environ: dict[str, str] | None = None, probe: GpuProbe | None = None,
                  keep_env: tuple[str, ...] = (), allow_cpu: bool = False,
                  hub_probe: HubProbe | None = None) -> tuple[PreparedRun, RerunEnv]:
    """(a one-job run to create, its env with what was dropped or missing); ConfigError when the
    folder is not a job, PlanError for bad ``gpus`` (indices as a list or in text, or "cpu"; None:
    as the job ran), OutputPathError when the new folder exists, PreflightError when it cannot
    work here (a big model on the CPU without ``allow_cpu``, an unreachable hub, too little memory)."""
    job_dir = Path(job_dir).expanduser().resolve()
    environ = environ or {}
    config = resolved_config(job_dir)
    env_record = JobDir(job_dir).env_record_path
    record = _read_json(env_record, dict, {})
    root = check_output_root(Path(output_root).expanduser().resolve() if output_root else default_output_root(job_dir))
    data, seed, stem = dataset_name(config["data"]), config["seed"], job_dir.name
    new_dir = root / f"{safe_component(data, 'dataset')}_seed{seed}" / stem
    if new_dir.exists():
        raise OutputPathError("the rerun's folder exists already; pick another --output-root", where=str(new_dir))
    config = {**config, "output_dir": str(new_dir), "resolved": True}
    try:
        typed = parse_config(config, new_dir / JOB_YAML, environ={})
    except TrainConfigError as exc:
        raise ConfigError(str(exc), where=str(job_dir / JOB_YAML)) from None
    rerun_env = job_env(job_dir, environ, keep_env)
    env = rerun_env.env
    world = _world_size(record, env_record)
    if gpus is None:
        accelerator = record.get("accelerator")
        ran_on_gpus = isinstance(accelerator, dict) and bool(accelerator.get("gpus"))
        gpus = list(range(world)) if ran_on_gpus else "cpu"
    plan = _plan(seed, data, gpus, env, root, world, allow_cpu)
    provenance = _read_json(job_dir / OVERRIDES, list, []) + [
        {"field": "*", "value": str(job_dir), "source": "rerun of"}]
    job = JobSpec(f"{new_dir.parent.name}/{stem}", SUITE, 1, str(job_dir / JOB_YAML), stem, seed, data,
                  new_dir, config, provenance, env, "fresh", world, True, typed)
    snapshot = (probe or GpuProbe()).snapshot()
    devices = resolve_devices(plan, snapshot)
    preflight_jobs(plan, [job], devices, snapshot, environ, hub_probe)
    return PreparedRun(plan, [job], devices), rerun_env


def _world_size(record: dict[str, Any], path: Path) -> int:
    world = record.get("world_size") or 1
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ConfigError(f"field 'world_size': expected a process count, got {world!r}", where=str(path))
    return world


def _plan(seed: int, data: str, gpus: str | list[int], env: dict[str, str], root: Path, world: int,
          allow_cpu: bool) -> Plan:
    """The one-job plan; ``gpus`` as the user gave it, read by the plan's own validator."""
    try:
        return Plan.model_validate({"suites": [SuiteRef(name=SUITE)], "pairs": [Pair(seed=seed, dataset=data)],
                                    "gpus": gpus, "slots": 1, "env": env, "output_root": str(root),
                                    "gpus_per_job": world, "allow_cpu": allow_cpu})
    except ValidationError as exc:
        raise PlanError([_problem(err) for err in exc.errors()]) from None


def _problem(err: ErrorDetails) -> str:
    """One pydantic error as the option or saved field it is about."""
    name = "--gpus" if err["loc"][:1] == ("gpus",) else f"field '{'.'.join(map(str, err['loc']))}'"
    return f"{name}: {err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})"
