"""Expand a Plan into jobs and lay out each job's directory.

One job per (suite config x sweep point x seed x dataset), in plan order: suites, then rounds, then
configs, then points, then pairs. Each job lives in ``<output_root>/<data>_seed<seed>/<config_stem>/``
(``__<point>`` added for a sweep's point, ``lr2e-4_r16``; ``__repK`` when a config repeats for the
same pair) and holds its resolved config (``job.yaml``, marked ``resolved:
true``: the trainer trains it as written), where each overridden value came from
(``overrides.json``), its command line (``command.json``, secrets masked), ``train.log``,
``events.jsonl`` and the trainer's outputs.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from lat_core.config.datasets import canonical
from lat_core.config.env import ENV_FIELDS, EnvValueError, apply_env, dataset_overrides, mask_env
from lat_core.config.job import JobConfig, TrainConfigError, parse_config
from lat_core.config import yaml_text
from lat_core.config.suites import SuiteRegistry
from lat_core.config.yaml_files import YamlFileError, YamlMapping, read_yaml_mapping
from lat_core.errors import ConfigError, OutputPathError, PlanError
from lat_core.contract.jobdir import JobDir
from lat_core.contract import kernel_tunings
from lat_core.contract.jobdir.names import COMMAND, JOB_YAML, OVERRIDES
from lat_core.contract.jobdir.provenance import SCREEN_SOURCE, SUITE_CONFIG_SOURCE, SWEEP_SOURCE
from lat_core.front.plan import Pair, Plan, SuiteRef
from lat_core.contract.sweep_roles import Stage, SweepRole
from lat_core.front.sweep import NO_POINT, Point, Sweep, Value, points, read_sweep
from lat_core.front.sweep_stages import SCREEN_SUFFIX
from lat_core.front.sweep_fields import target
from lat_core.safe_files import escape_problem, write_files
from lat_core.text import shorten

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")

#: Where one field of a job's config came from (overrides.json lists them, earliest first): the
#: layer (``source``) and, for an environment variable, which environment (``from``).
Provenance = TypedDict("Provenance", {"field": str, "value": object, "source": str, "from": NotRequired[str]})


@dataclass
class JobSpec:
    key: str  # "<data>_seed<seed>/<stem>": unique inside a run, also the job's relative directory
    suite: str
    round: int
    config_path: str
    stem: str
    seed: int
    dataset: str
    job_dir: Path
    config: dict[str, Any]  # the resolved config, as job.yaml holds it
    provenance: list[Provenance] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    mode: str = "fresh"  # fresh | resume | overwrite | done (succeeded before; not rerun)
    world: int = 1  # gpus_per_job: processes under torchrun
    use_libuv: bool = True
    typed: JobConfig | None = None  # the typed view of ``config``, as the trainer will parse job.yaml
    # whose success it waits for: keys of jobs of the same plan (a suite entry's after:), ids of any
    # job of the state directory (the plan's after:, --after); shared, read-only, among an entry's jobs
    after_keys: list[str] = field(default_factory=list)
    after_ids: list[int] = field(default_factory=list)
    sweep: SweepRole | None = None  # its part in a two-stage search

    def command(self) -> list[str]:
        flags = {"resume": ["--resume"], "overwrite": ["--overwrite"]}.get(self.mode, [])
        return [sys.executable, "-m", "lat_core.train", "--cfg", str(self.job_dir / JOB_YAML), *flags]


def safe_component(name: str, what: str) -> str:
    """A single path component from a config-provided name; never ``..``, absolute, or NUL."""
    if "\x00" in name:
        raise OutputPathError(f"{what} {name!r} contains a NUL byte")
    cleaned = _SAFE_NAME.sub("_", Path(name).name if "/" in name else name).strip("._")
    if not cleaned:
        raise OutputPathError(f"{what} {name!r} gives an empty directory name")
    return cleaned


def expand(plan: Plan, registry: SuiteRegistry, shell_env: dict[str, str] | None = None) -> list[JobSpec]:
    """All jobs of the plan, configs resolved; raises ConfigError naming the config file."""
    root = Path(plan.output_root).expanduser().resolve()
    shell_env = dict(shell_env or {})
    _check_dataset_variables(plan, shell_env)
    _check_kernel_tunings(shell_env)
    seen: dict[str, int] = {}
    typed_cache: dict[str, JobConfig] = {}
    entries: list[list[JobSpec]] = []
    for ref in plan.suites:
        suite = registry.get(ref.name)
        sweep = _sweep_of(plan, ref)
        swept = points(sweep)
        entries.append([])
        for round_no, cfg_path in suite.configs_for(plan.round_list(ref)):
            base_cfg = registry.pin_user_peft_spec(_load_experiment(cfg_path))
            make = partial(_make_job, plan, root, shell_env, suite.name, round_no, cfg_path, base_cfg,
                           seen=seen, typed_cache=typed_cache)
            if sweep.stages is None and sweep.halving is None:
                entries[-1] += [make(pair, point) for point in swept for pair in plan.pairs]
            else:
                entries[-1] += _searched(make, plan, sweep, swept, f"{suite.name}/{round_no}/{cfg_path.stem}")
    jobs = [job for entry in entries for job in entry]
    _link_after(plan, entries, jobs)
    return jobs


def _searched(make: Callable[..., JobSpec], plan: Plan, sweep: Sweep, swept: list[Point], base: str) -> list[JobSpec]:
    """A config's jobs under a search, each with its role. With ``stages``, per dataset: stage 1
    runs each point with the dataset's first seed and the ``screen`` fields (folder
    ``<config>__<point>__screen``), stage 2 each point with every pair, held until the engine
    promotes it (:mod:`lat_core.engine.promotion`); with ``halving``, the jobs of one dataset, seed
    and stage race (:mod:`lat_core.engine.halving`)."""
    jobs = []
    if sweep.stages is not None:
        first_pairs: dict[str, Pair] = {}
        for pair in plan.pairs:
            first_pairs.setdefault(pair.dataset, pair)
        for first in first_pairs.values():
            jobs += [_with_role(make(first, point, screen=sweep.stages.screen), sweep, i, point, base, Stage.SCREEN)
                     for i, point in enumerate(swept)]
    stage = Stage.ONLY if sweep.stages is None else Stage.FULL
    return jobs + [_with_role(make(pair, point), sweep, i, point, base, stage)
                   for i, point in enumerate(swept) for pair in plan.pairs]


def _with_role(job: JobSpec, sweep: Sweep, i: int, point: Point, base: str, stage: Stage) -> JobSpec:
    search, rule = f"{base}/{job.dataset}", sweep.halving
    promote = sweep.stages.promote if sweep.stages is not None and stage is Stage.FULL else 0
    race = f"{search}/seed{job.seed}/{stage.value}" if rule is not None else ""
    job.sweep = SweepRole(i, point.name, search, stage, promote, race, rule.rungs if rule else (), rule.eta if rule else 0)
    return job


def _link_after(plan: Plan, entries: list[list[JobSpec]], jobs: list[JobSpec]) -> None:
    """Each job's parents: the plan's ``after`` ids, and the keys of the jobs its entry's ``after`` names."""
    after_ids = list(plan.after)
    for ref, entry in zip(plan.suites, entries):
        keys = [j.key for j in jobs if any(a.holds(j.suite, j.round) for a in ref.after)]
        for job in entry:
            job.after_keys, job.after_ids = keys, after_ids


def _sweep_of(plan: Plan, ref: SuiteRef) -> Sweep:
    """The entry's own sweep, else the plan's; PlanError for one the plan's checks did not see."""
    own = bool(ref.sweep)
    where = f"suites[{plan.suites.index(ref)}].sweep" if own else "sweep"
    sweep, problems = read_sweep(ref.sweep if own else plan.sweep, where)
    if problems:
        raise PlanError(problems, where="plan")
    return sweep


def _check_dataset_variables(plan: Plan, shell_env: dict[str, str]) -> None:
    """HP_DATA (the trainer's dataset variable) or DATA (the round script's) naming another dataset
    than a pair would make the trainer load one dataset while the job's folder, the journal and
    admission's memory record go by the pair. The pair is where LAT takes the dataset from, so a
    differing one is an error, not a guess."""
    for source, env in (("launching shell", shell_env), ("plan env", plan.env)):
        for name, value in dataset_overrides(env):
            other = [p for p in plan.pairs if canonical(p.dataset) != canonical(value)]  # HP_DATA=rte is glue-tvt_rte
            if other:
                raise ConfigError(f"{name}={value} would replace the dataset of pair {other[0]}; name the dataset "
                                  f"in the pairs instead (e.g. {other[0].seed}:{value}) and unset {name}",
                                  where=source)


def _check_kernel_tunings(shell_env: dict[str, str]) -> None:
    """The launching shell's LAT_KERNEL_TUNINGS(_DIR), checked as the plan's are (plan.py checks
    those): the trainer would only log a bad one and autotune."""
    problems = kernel_tunings.problems(shell_env)
    if problems:
        raise ConfigError(f"{problems[0].name}={problems[0].value!r} from {SHELL}: {problems[0].problem}")


def _make_job(plan: Plan, root: Path, shell_env: dict[str, str], suite: str, round_no: int, cfg_path: Path,
              base_cfg: dict[str, Any], pair: Pair, point: Point, *, seen: dict[str, int],
              typed_cache: dict[str, JobConfig], screen: tuple[tuple[str, Value], ...] = ()) -> JobSpec:
    group = f"{safe_component(pair.dataset, 'dataset')}_seed{pair.seed}"
    stem = safe_component(cfg_path.stem, "config name")
    if point.name:
        stem = f"{stem}{POINT_SEPARATOR}{safe_component(point.name, 'sweep point')}"
    if screen:
        stem = f"{stem}{POINT_SEPARATOR}{SCREEN_SUFFIX}"
    count = seen.get(f"{group}/{stem}", 0) + 1
    seen[f"{group}/{stem}"] = count
    if count > 1:
        stem = f"{stem}__rep{count}"
    job_dir = root / group / stem
    config, provenance, origin = resolve_config(base_cfg, cfg_path, plan, shell_env, pair, job_dir, stem, point,
                                                screen)
    wants_resume = bool(config.pop("resume", False)) or plan.resume
    mode = job_mode(job_dir, wants_resume, plan.overwrite, strict=bool(base_cfg.get("resume")))
    world = _positive_int(config.pop("gpus_per_job", plan.gpus_per_job), cfg_path)
    use_libuv = bool(config.pop("use_libuv", True))
    typed = typed_config(config, cfg_path, job_dir, origin, typed_cache)
    return JobSpec(f"{group}/{stem}", suite, round_no, str(cfg_path), stem, pair.seed, pair.dataset,
                   job_dir, config, provenance, {**plan.env, **shell_env}, mode, world, use_libuv, typed)


def _positive_int(value: object, cfg_path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"field 'gpus_per_job': expected a positive integer, got {value!r}", where=str(cfg_path))
    return value


def job_mode(job_dir: Path, resume: bool, overwrite: bool, strict: bool) -> str:
    """How a job starts given what its directory already holds.

    Succeeded before -> ``done`` (not rerun) unless ``overwrite``. ``resume`` from a job's own config
    is strict (the trainer fails at once without a checkpoint); a run-level resume only resumes jobs
    that had started, so jobs the crash kept from starting begin normally."""
    if overwrite:
        return "overwrite"
    folder = JobDir(job_dir)
    if folder.has_finished():
        return "done"
    if resume and (strict or folder.events_path.exists()):
        return "resume"
    return "fresh"


def _load_experiment(path: Path) -> YamlMapping:
    try:
        data = read_yaml_mapping(path, "a mapping (model, peft, train, ...)")
    except YamlFileError as exc:
        raise ConfigError(exc.message, where=exc.where) from None
    for key in ("name", "output_dir"):  # replaced by the job's own, but one leaving its folder is a mistake to say
        if problem := escape_problem(key, data.get(key)):
            raise ConfigError(problem, where=str(path))
    return data


# Where a value can come from, earliest first: a later layer overrides an earlier one. The sweep is
# last: its values name the job's folder, so nothing may change them after.
PLAN_OVERRIDES, PLAN_ENV, SHELL, SWEEP = "plan overrides", "plan env", "the launching shell", "the plan's sweep"
SCREEN = "the plan's sweep stages.screen"
POINT_SEPARATOR = "__"  # <config stem>__<point>: lr2e-4_r16 of tiny_lora is tiny_lora__lr2e-4_r16


def resolve_config(base: Mapping[str, object], cfg_path: Path, plan: Plan, shell_env: dict[str, str], pair: Pair,
                   job_dir: Path, stem: str, point: Point = NO_POINT, screen: tuple[tuple[str, Value], ...] = (),
                   ) -> tuple[dict[str, Any], list[Provenance], dict[str, str]]:
    """The job's final config: experiment YAML < plan overrides < plan env < launching shell < the
    sweep's point < a stage-1 job's ``screen`` fields, then the pair's dataset and seed; returns
    (config, provenance, origin: field -> where it came from).

    This is the one place overrides are applied: the config is written to job.yaml with
    ``resolved: true`` and the trainer applies nothing on top of it."""
    config = {key: _plain_copy(value) for key, value in base.items()}
    provenance: list[Provenance] = [{"field": "*", "value": str(cfg_path), "source": SUITE_CONFIG_SOURCE}]
    origin: dict[str, str] = {}
    for dotted, value in _flatten(plan.overrides):
        _set(config, dotted, value, cfg_path)
        provenance.append({"field": dotted, "value": value, "source": "plan.overrides"})
        origin[dotted] = PLAN_OVERRIDES
    for label, env in ((PLAN_ENV, plan.env), (SHELL, shell_env)):
        config = _apply_env_layer(config, env, label, provenance, origin)
    config = _apply_point(config, point.values, cfg_path, provenance, origin)
    config = _apply_point(config, screen, cfg_path, provenance, origin, SCREEN)
    data = _plain_copy(plan.datasets[pair.dataset]) if pair.dataset in plan.datasets else pair.dataset
    injected: dict[str, object] = {"name": stem, "data": data, "seed": pair.seed, "output_dir": str(job_dir)}
    for key, value in injected.items():
        config[key] = value
        provenance.append({"field": key, "value": value, "source": "plan"})
        origin[key] = "the plan's pairs" if key in ("data", "seed") else "the plan"
    _drop_outranked_max_steps(config, origin, provenance)
    config["resolved"] = True
    return config, provenance, origin


def _apply_env_layer(config: dict[str, Any], env: dict[str, str], label: str, provenance: list[Provenance],
                     origin: dict[str, str]) -> dict[str, Any]:
    sources: dict[str, str] = {}
    try:
        config = apply_env(config, env, sources)
    except EnvValueError as exc:
        raise ConfigError(f"{exc.name}={exc.value!r} from {label}: {exc.problem}") from None
    for dotted, source in sources.items():
        provenance.append({"field": dotted, "value": _get(config, dotted), "source": source, "from": label})
        origin[dotted] = f"{source.removeprefix('env:')} from {label}"
    return config


def _apply_point(config: dict[str, Any], values: tuple[tuple[str, Value], ...], cfg_path: Path,
                 provenance: list[Provenance], origin: dict[str, str], layer: str = SWEEP) -> dict[str, Any]:
    """A point's values (or stage 1's ``screen`` fields) over everything else; a variable (HP_LR)
    sets its field as the env would. Each is in the provenance with source ``sweep`` (what results
    group a sweep's jobs by) or ``sweep screen``."""
    source = SWEEP_SOURCE if layer == SWEEP else SCREEN_SOURCE
    for key, value in values:
        plain = list(value) if isinstance(value, tuple) else value
        if key in ENV_FIELDS:
            config = _apply_env_layer(config, {key: str(plain)}, layer, [], {})
        else:
            _set(config, key, plain, cfg_path)
        provenance.append({"field": key, "value": plain, "source": source})
        origin[target(key)] = layer
    return config


def _rank(origin: dict[str, str], dotted: str, config: dict[str, Any]) -> int:
    """0: not set, 1: the experiment YAML, 2..: the layers after it."""
    where = origin.get(dotted)
    if where is None:
        return 1 if _get(config, dotted) is not None else 0
    layers = {PLAN_OVERRIDES: 2, SWEEP: 5, SCREEN: 6}
    return layers.get(where, 3 if where.endswith(PLAN_ENV) else 4)


def _drop_outranked_max_steps(config: dict[str, Any], origin: dict[str, str], provenance: list[Provenance]) -> None:
    """train.epochs set at a later layer than train.max_steps wins over it (a max_steps set at the
    same layer or later wins, as in the trainer). job.yaml holds the outcome, without the loser, so
    the trainer, which sees one layer, decides the same way."""
    epochs, steps = _rank(origin, "train.epochs", config), _rank(origin, "train.max_steps", config)
    if epochs and steps and epochs > steps:
        del config["train"]["max_steps"]
        provenance.append({"field": "train.max_steps", "value": None,
                           "source": f"dropped: train.epochs from {origin['train.epochs']} outranks it"})


# What differs between the jobs of one config: the pair (already checked by the plan) and its folder.
PAIR_FIELDS = ("data", "seed", "output_dir")


def typed_config(config: dict[str, Any], cfg_path: Path, job_dir: Path, origin: dict[str, str],
                 cache: dict[str, JobConfig] | None = None) -> JobConfig:
    """Build the typed config (type and range of every field); ConfigError naming the field and
    where its value came from, so a bad value stops the run before anything starts.

    With ``cache``, a config is validated once and its other pairs' jobs are copies with their own
    pair and folder (a third of the CPU of expanding a 10,000-job plan went to repeating it)."""
    # a dataset named by its columns is a mapping, which the cached copy could not take as it is
    key = _cache_key(config) if cache is not None and isinstance(config["data"], str) else None
    if cache is not None and key is not None and key in cache:
        return cache[key].model_copy(update={  # shallow: the sections are shared, read-only
            "data": config["data"], "seed": config["seed"], "cfg_path": job_dir / JOB_YAML,
            "output_dir": Path(config["output_dir"]).expanduser().resolve()})
    try:
        typed = parse_config(config, job_dir / JOB_YAML, environ={})
    except TrainConfigError as exc:
        where = _origin_of(exc.field, origin) or str(cfg_path)
        raise ConfigError(exc.message, where=where) from None
    if cache is not None and key is not None:
        cache[key] = typed
    return typed


def _cache_key(config: dict[str, Any]) -> str | None:
    """What the jobs of one config share, as text; None for a mapping whose keys mix types (no
    order to sort them in): such a config is not cached and its validation says what is wrong."""
    try:
        return json.dumps({k: v for k, v in config.items() if k not in PAIR_FIELDS}, sort_keys=True, default=str)
    except TypeError:
        return None


def _origin_of(field: str | None, origin: dict[str, str]) -> str | None:
    while field:
        if field in origin:
            return origin[field]
        field = field.rpartition(".")[0]
    return None


def _get(config: dict[str, Any], dotted: str) -> object:
    node: object = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node

def _flatten(mapping: Mapping[Any, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, dotted + ".")
        else:
            yield dotted, value

def _set(config: dict[str, Any], dotted: str, value: object, cfg_path: Path) -> None:
    """``config[a][b] = value`` for ``a.b``; an empty section (``train:``) takes it as a missing one does."""
    node = config
    *parents, leaf = dotted.split(".")
    for i, part in enumerate(parents):
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            section = ".".join(parents[:i + 1])
            raise ConfigError(f"plan overrides set {dotted!r}, but field {section!r} is {shorten(repr(node), 80)}, "
                              "not a mapping", where=str(cfg_path))
    node[leaf] = value


def materialize(job: JobSpec) -> None:
    """Create the job directory and write job.yaml, overrides.json and command.json."""
    record: dict[str, object] = {"argv": job.command(), "env": mask_env(job.env), "cwd": str(job.job_dir)}
    try:
        write_files(job.job_dir, {JOB_YAML: yaml_text.dump(job.config).encode(),
                                  OVERRIDES: _json_rows(job.provenance).encode(),
                                  COMMAND: _json_rows(record).encode()})
    except OSError as exc:  # read-only file system, disk full, a file where a directory should be
        raise OutputPathError(f"cannot write the job directory: {exc.strerror or exc}", where=str(job.job_dir)) from exc


def _json_rows(value: list[Provenance] | dict[str, object]) -> str:
    """JSON with one entry (a provenance record, an argv) per line: as readable as an indented
    dump, and made by the C encoder (an ``indent`` falls back to the pure-Python one, which took
    a tenth of a 10,000-job plan's expansion)."""
    if isinstance(value, list):
        items = [json.dumps(v, default=str) for v in value]
        return "[\n" + ",\n".join(items) + "\n]\n" if items else "[]\n"
    items = [f"{json.dumps(k)}: {json.dumps(v, default=str)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n}\n" if items else "{}\n"


def _plain_copy(value: object) -> object:
    """A copy of a config read from YAML (dicts, lists, scalars): copy.deepcopy's memo and
    dispatch cost more than the copying, once per job of a large plan."""
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    return value
