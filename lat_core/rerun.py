"""Run a finished (or failed) job again from its folder, into a new folder: ``lat-tui rerun``.

What makes it the same job: the resolved config of its job.yaml (seed and dataset included; a job
started by hand without ``resolved: true`` is taken from env.json's resolved config), the env of its
command.json (values masked there, i.e. secrets, come from the caller's environment) and its
process count. Nothing is written until every check passed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from lat_core.config.env import MASK
from lat_core.config.job import TrainConfigError, parse_config
from lat_core.devices import resolve_devices
from lat_core.errors import ConfigError, OutputPathError
from lat_core.jobs import JobSpec, safe_component
from lat_core.monitor.gpu import GpuProbe
from lat_core.plan import Pair, Plan, SuiteRef
from lat_core.safe_files import check_output_root
from lat_core.service import PreparedRun

SUITE = "rerun"   # the suite name the new run files the job under


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def resolved_config(job_dir: Path) -> dict:
    """The job's resolved config: job.yaml when the engine wrote it, else env.json's record."""
    path = job_dir / "job.yaml"
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"no readable job.yaml ({exc}); is this a job folder?", where=str(job_dir)) from None
    if isinstance(config, dict) and config.get("resolved") is True:
        return config
    record = _read_json(job_dir / "env.json")
    if isinstance(record, dict) and isinstance(record.get("config"), dict):
        return dict(record["config"])
    raise ConfigError("job.yaml is not resolved (started by hand) and env.json holds no resolved config: "
                      "run the job once with this version of LAT first", where=str(job_dir))


def job_env(job_dir: Path, environ: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """command.json's env with masked values taken from ``environ``; also the masked names missing there."""
    record = _read_json(job_dir / "command.json") or {}
    env, missing = {}, []
    for name, value in (record.get("env") or {}).items():
        if value != MASK:
            env[name] = str(value)
        elif environ.get(name):
            env[name] = environ[name]
        else:
            missing.append(name)
    return env, missing


def default_output_root(job_dir: Path) -> Path:
    """``<the job's output root>-rerun-<time>``: beside the original root, so results tables of the
    original root do not mix the rerun in."""
    return job_dir.parent.parent.with_name(f"{job_dir.parent.parent.name}-rerun-{time.strftime('%Y%m%d-%H%M%S')}")


def prepare_rerun(job_dir: Path, output_root: Path | None = None, gpus=None,
                  environ: dict[str, str] | None = None, probe: GpuProbe | None = None) -> tuple[PreparedRun, list[str]]:
    """(a one-job run to create, the secrets that were not in ``environ``); ConfigError when the folder
    is not a job, OutputPathError when the new folder exists already."""
    job_dir = Path(job_dir).expanduser().resolve()
    environ = environ or {}
    config = resolved_config(job_dir)
    record = _read_json(job_dir / "env.json") or {}
    root = check_output_root(Path(output_root).expanduser().resolve() if output_root else default_output_root(job_dir))
    data, seed, stem = str(config.get("data", "")), int(config.get("seed", 1)), job_dir.name
    new_dir = root / f"{safe_component(data, 'dataset')}_seed{seed}" / stem
    if new_dir.exists():
        raise OutputPathError("the rerun's folder exists already; pick another --output-root", where=str(new_dir))
    config = {**config, "output_dir": str(new_dir), "resolved": True}
    try:
        typed = parse_config(config, new_dir / "job.yaml", environ={})
    except TrainConfigError as exc:
        raise ConfigError(str(exc), where=str(job_dir / "job.yaml")) from None
    env, missing = job_env(job_dir, environ)
    world = int(record.get("world_size") or 1)
    if gpus is None:
        gpus = "cpu" if not (record.get("accelerator") or {}).get("gpus") else list(range(world))
    plan = Plan(suites=[SuiteRef(name=SUITE)], pairs=[Pair(seed=seed, dataset=data)], gpus=gpus,
                slots=1, env=env, output_root=str(root), gpus_per_job=world)
    provenance = (_read_json(job_dir / "overrides.json") or []) + [
        {"field": "*", "value": str(job_dir), "source": "rerun of"}]
    job = JobSpec(f"{new_dir.parent.name}/{stem}", SUITE, 1, str(job_dir / "job.yaml"), stem, seed, data,
                  new_dir, config, provenance, env, "fresh", world, True, typed)
    devices = resolve_devices(plan, (probe or GpuProbe()).snapshot())
    return PreparedRun(plan, [job], devices), missing
