"""The Plan: what to run (suites x rounds x seed:dataset pairs), where (GPUs and slots) and when.

A plan comes from ``plan.yaml`` or from the seeds' flags (``--suite E4 --round all --pairs
"87:glue-tvt_cola" --gpus "2 3 5 6" --gpu-plan "3,3,1,3" --sleep-mins 5``); both produce the same
model. Validation collects every problem, each naming the file and the field, so nothing starts
from a plan that does not validate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from lat_core.config.datasets import KNOWN_DATASETS, canonical, check_dataset
from lat_core.config.env import ENV_FIELDS, MASK, TRACKER_SWITCHES, is_secret, is_valid_name, mask_env, parse_env_value
from lat_core.notify import mask_url
from lat_core.config.paths import USER, config_trees
from lat_core.config.suites import SuiteRegistry
from lat_core.config.user_data import DataSpecError, columns_problem, parse_spec
from lat_core.contract.plan_defaults import PLAN_DEFAULTS as D
from lat_core.config.yaml_files import YamlFileError, YamlMapping, read_yaml_mapping
from lat_core.contract import kernel_tunings
from lat_core.errors import LatError, PlanError
from lat_core.front.plan_problems import Found, bounded, problem_lines
from lat_core.text import shorten
from lat_core.front.plan_retries import OnFailure
from lat_core.front.sweep import read_sweep
from lat_core.front.plan_after import after_problems
from lat_core.safe_files import escape_problem

AUTO_REMEDIES = ("expandable_segments", "smaller_micro_batch", "gradient_checkpointing", "fewer_workers",
                 "fewer_slots")
_PAIR_RE = re.compile(r"^\s*(-?\d+)\s*:\s*(\S.*?)\s*$")


class AfterRef(BaseModel):
    """Jobs of the plan that a suite entry's jobs wait for: those of ``suite`` (in ``rounds``)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    suite: str = Field(min_length=1)
    rounds: Union[Literal["all"], list[int]] = "all"

    @field_validator("rounds", mode="before")
    @classmethod
    def _rounds(cls, value: object) -> object:
        return parse_rounds(value)

    def holds(self, suite: str, round_no: int) -> bool:
        return suite == self.suite and (self.rounds == "all" or round_no in self.rounds)


class SuiteRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    rounds: Union[Literal["all"], list[int]] = "all"
    sweep: YamlMapping = Field(default_factory=dict)  # this entry's own sweep (lat_core.front.sweep), else the plan's
    # its jobs start once every job of these succeeded, and are cancelled if one does not (lat_core.engine.dependencies)
    after: list[AfterRef] = Field(default_factory=list)

    @field_validator("rounds", mode="before")
    @classmethod
    def _rounds(cls, value: object) -> object:
        return parse_rounds(value)

    @field_validator("after", mode="before")
    @classmethod
    def _after(cls, value: object) -> object:
        """``after: E4``, ``after: {suite: E4, rounds: [1]}`` or a list of those."""
        value = value if isinstance(value, list) else [value]
        return [{"suite": v} if isinstance(v, str) else v for v in value]


class OnOom(BaseModel):
    model_config = ConfigDict(extra="forbid")
    remedies: list[str] = Field(min_length=1)
    max_retries: int = Field(default=D.max_retries, ge=1, le=10)

    @field_validator("remedies")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [r for r in value if r not in AUTO_REMEDIES]
        if unknown:
            raise ValueError(f"unknown remedy {unknown[0]!r} (choose from {', '.join(AUTO_REMEDIES)})")
        return value


class Pair(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = Field(ge=0)
    dataset: str = Field(min_length=1)

    def __str__(self) -> str:
        return f"{self.seed}:{self.dataset}"


AUTO_SLOTS_CAP = 16  # beyond this, per-job launch overhead and context switching eat the gain


def auto_gpu_slots(n_gpus: int, cpu_count: int | None = None) -> int:
    """Concurrent jobs per GPU under ``slots: auto``: one per CPU core that GPU has, capped."""
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    return max(1, min(AUTO_SLOTS_CAP, cores // max(1, n_gpus)))


class Plan(BaseModel):
    """A validated plan. ``gpus == "cpu"`` runs jobs on the CPU in ``slots`` slots."""

    model_config = ConfigDict(extra="forbid")
    suites: list[SuiteRef] = Field(min_length=1)
    pairs: list[Pair] = Field(min_length=1)
    # defaults: the one table (lat_core.contract.plan_defaults), which a run's saved plan reads too
    gpus: Union[Literal["cpu"], list[int]] = D.gpus
    # "auto": on a GPU, as many jobs as memory-aware admission lets in, at most one per CPU core the
    # GPU has (each trainer needs a core to keep its GPU fed); on the CPU or Slurm, one per device
    slots: Union[Literal["auto"], int, list[int]] = D.slots
    countdown_minutes: float = Field(default=D.countdown_minutes, ge=0, le=7 * 24 * 60)
    env: dict[str, str] = Field(default_factory=dict)
    output_root: str = Field(default=D.output_root, min_length=1)
    overrides: YamlMapping = Field(default_factory=dict)
    # datasets named by their columns (lat_core.config.user_data), which a pair names as its dataset:
    # {reviews: {path: ./reviews.csv, text: review, label: sentiment}} and pairs ["1:reviews"]
    datasets: dict[str, YamlMapping] = Field(default_factory=dict)
    # one job per point of each config x pair (lat_core.front.sweep); a suite entry's own replaces it there
    sweep: YamlMapping = Field(default_factory=dict)
    # ids of jobs of this state directory (any run) whose success every job of the plan waits for (--after)
    after: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)
    notify: YamlMapping = Field(default_factory=dict)  # see lat_core.notify: email / webhook / on
    gpus_per_job: int = Field(default=D.gpus_per_job, ge=1, le=64)  # gang-scheduled; configs may set their own
    min_free_gb: float = Field(default=D.min_free_gb, ge=0)  # a GPU with less free memory takes no new job
    backend: Literal["local", "slurm"] = D.backend
    slurm: YamlMapping = Field(default_factory=dict)  # options of the Slurm backend (lat_core.engine.backends.slurm)
    on_oom: Optional[OnOom] = None  # automatic retry of OOM-killed jobs (lat_core.engine.retries)
    on_failure: Optional[OnFailure] = None  # automatic retry of transient failure classes (same module)
    resume: bool = D.resume  # restart started jobs from their last checkpoint-* (strict)
    overwrite: bool = D.overwrite  # rerun jobs that already succeeded, from scratch
    mps: bool = D.mps  # jobs on a GPU share it through a private CUDA MPS daemon (lat_core.engine.mps)
    # Queued jobs that can share one base (lat_core.config.fuse) train as one fused process per group
    # (lat_core.engine.fusion). "auto" (the default): on GPUs, for the families and row widths where
    # a group was measured to win (lat_core.config.fuse_measured); true: always, the CPU too; false:
    # a process per job everywhere.
    fuse: Union[Literal["auto"], bool] = D.fuse
    warm_start: bool = D.warm_start  # fork trainers from a process that has imported torch & co. (lat_core.engine.warm)
    allow_cpu: bool = D.allow_cpu  # train a model too big for the CPU there anyway (lat_core.front.preflight refuses it)
    # the circuit breaker (lat_core.engine.breaker): admission pauses when the run's first `breaker`
    # ended jobs all failed with the same systemic class (hub, data, config, ...); 0 turns it off.
    # Always saved, so the engine reads it from the saved plan (a plan saved before it had none: off).
    breaker: int = Field(default=D.breaker, ge=0, le=1000)
    # the user's config tree (suites/, experiments/, peft/) the suites come from, searched before the
    # shipped one; relative in a plan file: from the file's folder. A loaded plan holds it absolute
    # (the tree its registry had, --configs or $LAT_CONFIGS included), so a saved plan replays the
    # same suites from wherever the file is moved to. None: the shipped tree alone.
    configs: Optional[str] = None

    @field_validator("suites", mode="before")
    @classmethod
    def _suites(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.split()
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("pairs", mode="before")
    @classmethod
    def _pairs(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.split()
        if isinstance(value, list):
            return [parse_pair(v) if isinstance(v, str) else v for v in value]
        return value

    @field_validator("pairs")
    @classmethod
    def _unique_pairs(cls, value: list[Pair]) -> list[Pair]:
        seen = set()
        for pair in value:
            if pair in seen:
                raise ValueError(f"pair {pair} is listed twice")
            seen.add(pair)
        return value

    @field_validator("after", mode="before")
    @classmethod
    def _after_ids(cls, value: object) -> object:
        if isinstance(value, str):
            return _split_numbers(value, "job id")
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() != "cpu":
            value = _split_numbers(value, "GPU index")
        elif isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("gpus")
    @classmethod
    def _gpus_valid(cls, value: Literal["cpu"] | list[int]) -> Literal["cpu"] | list[int]:
        if isinstance(value, list):
            if not value:
                raise ValueError("expected at least one GPU index, or 'cpu'")
            if any(g < 0 for g in value):
                raise ValueError("GPU indices must be >= 0")
            if len(set(value)) != len(value):
                raise ValueError("a GPU is listed twice")
        return value

    @field_validator("slots", mode="before")
    @classmethod
    def _slots(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if isinstance(value, str):
            numbers = _split_numbers(value, "slot count")
            return numbers[0] if len(numbers) == 1 else numbers
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: object) -> object:
        if isinstance(value, dict):
            return {k: _env_scalar(k, v) for k, v in value.items()}
        return value

    def slot_plan(self, cpu_count: int | None = None) -> list[int]:
        """Slots per device, one entry per GPU (or one for the CPU); "auto" resolved (see ``slots``)."""
        count = 1 if self.gpus == "cpu" else len(self.gpus)
        if self.slots == "auto":
            if self.gpus == "cpu" or self.backend == "slurm":  # on Slurm the cluster's scheduler packs jobs
                return [1] * count
            return [auto_gpu_slots(count, cpu_count)] * count
        return [self.slots] * count if isinstance(self.slots, int) else list(self.slots)

    def suite_registry(self, given: SuiteRegistry | None = None) -> SuiteRegistry:
        """The suites this plan names: its own config tree's (then the shipped one) when it has
        one, else ``given`` (default: the shipped tree and $LAT_CONFIGS)."""
        if self.configs is not None:
            return SuiteRegistry(config_trees(self.configs))
        return given or SuiteRegistry(config_trees())

    def round_list(self, ref: SuiteRef) -> "list[int] | None":
        return None if ref.rounds == "all" else list(ref.rounds)

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_defaults=False)
        data["pairs"] = [str(p) for p in self.pairs]
        data["suites"] = [_saved_suite(s) for s in self.suites]
        for at_default in ("backend", "gpus_per_job", "min_free_gb"):  # a saved plan reads them back from the table
            if data[at_default] == getattr(D, at_default):
                del data[at_default]
        # fuse and breaker stay, false and 0 included: a saved plan without one is from before it
        # (saved_plan.FUSE_IF_UNSAVED, BREAKER_IF_UNSAVED)
        for optional in ("overrides", "datasets", "sweep", "after", "notify", "on_oom", "on_failure", "slurm",
                         "resume", "overwrite", "mps", "allow_cpu", "configs"):
            if not data[optional]:
                del data[optional]
        if data["warm_start"] == D.warm_start:
            del data["warm_start"]
        data["env"] = mask_env(data["env"])
        if "notify" in data:
            data["notify"] = _mask_notify(data["notify"])
        text: str = yaml.safe_dump(data, sort_keys=False)
        return text


def _saved_suite(ref: SuiteRef) -> dict[str, object]:
    """A suite entry as saved: its sweep and what it waits for only where it has them."""
    saved: dict[str, object] = {"name": ref.name, "rounds": ref.rounds}
    if ref.sweep:
        saved["sweep"] = ref.sweep
    if ref.after:
        saved["after"] = [a.model_dump() for a in ref.after]
    return saved


def _mask_secrets(node: object) -> object:
    """A saved plan never holds a credential: their values live in the state directory's 0600
    secrets file (:mod:`lat_core.contract.run_secrets`); ``password_env`` names a variable and stays."""
    return _mask_mapping(node) if isinstance(node, dict) else node


def _mask_mapping(mapping: Mapping[Any, object]) -> YamlMapping:
    return {k: (MASK if is_secret(str(k)) and not str(k).endswith("_env") else _mask_secrets(v))
            for k, v in mapping.items()}


def _mask_notify(notify: Mapping[Any, object]) -> YamlMapping:
    """Also a webhook's URL path (Slack and Discord put the token there) and its header values."""
    masked = _mask_mapping(notify)
    webhook = masked.get("webhook")
    if isinstance(webhook, dict):
        if webhook.get("url"):
            webhook["url"] = mask_url(str(webhook["url"]))
        if isinstance(webhook.get("headers"), dict):
            webhook["headers"] = {k: MASK for k in webhook["headers"]}
    return masked


def parse_rounds(value: object) -> object:
    """``rounds`` as a suite reference gives it: "all" (or nothing), a number, or numbers in text;
    anything else is left for the model to name."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return "all"
    if isinstance(value, bool):
        raise ValueError("expected 'all', a round number or a list of round numbers")
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        return _split_numbers(value, "round number")
    return value


def parse_pair(text: str) -> dict[str, int | str]:
    match = _PAIR_RE.match(text)
    if not match:
        raise ValueError(f"pair {text!r}: expected 'seed:dataset', e.g. '87:glue-tvt_cola'")
    return {"seed": int(match.group(1)), "dataset": match.group(2)}


def _split_numbers(text: str, what: str) -> list[int]:
    parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"{text!r}: expected {what}s separated by spaces or commas") from None


def _env_scalar(key: object, value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(f"env.{key}: expected a string or number, got {type(value).__name__}")


# ---------------------------------------------------------------- loading and checking


def load_plan(path: str | Path, registry: SuiteRegistry) -> Plan:
    """Read, parse and fully validate a plan file; PlanError lists every problem with its field."""
    path = Path(path)
    return plan_from_mapping(load_plan_mapping(path), registry, where=str(path), base=path.parent)


def load_plan_mapping(path: Path) -> YamlMapping:
    """The raw mapping of a plan file; PlanError for unreadable, binary, huge or non-YAML files and
    a non-mapping."""
    try:
        return read_yaml_mapping(path, "a mapping of plan fields")
    except YamlFileError as exc:
        raise PlanError([exc.message], where=exc.where) from None


def plan_from_mapping(data: object, registry: SuiteRegistry, *, where: str, base: Path | None = None) -> Plan:
    if not isinstance(data, dict):
        raise PlanError([f"expected a mapping of plan fields, got {type(data).__name__}"], where=where)
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        raise PlanError(bounded(_pydantic_problems(exc)), where=where) from None
    base = base or Path.cwd()
    plan.datasets, own_problems = own_datasets(plan.datasets, base)
    tree_problems = _own_config_tree(plan, registry, base)
    if not tree_problems:
        registry = plan.suite_registry(registry)
    problems = own_problems + tree_problems + check_plan(plan, registry, base) + _override_escapes(plan)
    if plan.resume and plan.overwrite:
        problems.append("fields 'resume' and 'overwrite' exclude each other")
    if plan.backend == "slurm" or plan.slurm:
        from lat_core.config.slurm_options import option_problems

        problems += option_problems(plan.slurm)
    if plan.backend == "slurm":
        problems += slurm_plan_problems(plan)
    elif isinstance(plan.slurm, dict) and plan.slurm.get("nodes", 1) != 1:
        problems.append("plan field 'slurm.nodes': jobs spread over several nodes only through Slurm: "
                        "set backend: slurm")
    if plan.backend != "slurm" and isinstance(plan.slurm, dict) and plan.slurm.get("pack", 1) != 1:
        problems.append("plan field 'slurm.pack': jobs share a Slurm job only on Slurm (this host's jobs fork from "
                        "one preloaded process anyway: warm_start): set backend: slurm")
    if problems:
        raise PlanError(bounded(problems), where=where)
    # Jobs run with their own directory as cwd: a dataset given as a relative path must not depend on it.
    plan.pairs = [_absolute_dataset(p, base, plan.datasets) for p in plan.pairs]
    return plan


def slurm_plan_problems(plan: Plan) -> list[str]:
    """A Slurm plan asks the cluster for each job's GPUs and bounds its jobs in the queue: fields
    that pick this host's GPUs and slots would be silently ignored, so they are refused."""
    problems = []
    if plan.gpus != "cpu":
        problems.append(f"field 'gpus': {plan.gpus} names GPUs of this machine, but a Slurm job gets its GPUs "
                        "from the cluster: leave 'gpus' out, set gpus_per_job (GPUs and processes per job) "
                        "and slurm.gres (gpu, shard, auto or none)")
    if plan.slots != "auto":
        problems.append(f"field 'slots': {plan.slots} is per GPU of this machine; on Slurm, slurm.max_jobs "
                        "bounds the jobs in the queue at once")
    return problems


def _own_config_tree(plan: Plan, registry: SuiteRegistry, base: Path) -> list[str]:
    """``plan.configs`` made absolute (from ``base``, the plan file's folder), or set to the user
    tree of the registry it was checked against, so the plan says which suites it means."""
    if plan.configs is None:
        user = next((tree.path for tree in registry.trees if tree.origin == USER), None)
        plan.configs = None if user is None else str(user)
        return []
    tree = (base / Path(plan.configs).expanduser()).resolve()
    if not tree.is_dir():
        return [f"field 'configs': no directory {tree}"]
    plan.configs = str(tree)
    return []


def _override_escapes(plan: Plan) -> list[str]:
    """Overrides of a job's name or folder that would leave its folder (each job gets its own anyway)."""
    found = (escape_problem(key, plan.overrides.get(key), f"overrides.{key}") for key in ("name", "output_dir"))
    return [problem for problem in found if problem]


def own_datasets(datasets: dict[str, YamlMapping], base: Path) -> tuple[dict[str, YamlMapping], list[str]]:
    """The plan's ``datasets``, each checked as a job's ``data:`` mapping (keys, a local path made
    absolute, the columns of local files) and named by its key; and the problems found."""
    resolved: dict[str, YamlMapping] = {}
    problems: list[str] = []
    for name, raw in datasets.items():
        where = f"field 'datasets.{name}'"
        if canonical(name) in KNOWN_DATASETS or "/" in name or name.startswith("."):
            problems.append(f"{where}: a shipped dataset's name or a path; name it otherwise")
            continue
        try:
            spec = parse_spec({"name": name, **raw}, base)
        except DataSpecError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if problem := columns_problem(spec):
            problems.append(f"{where}: {problem}")
        resolved[name] = spec.model_dump(exclude_defaults=True)
    return resolved, problems


def _absolute_dataset(pair: Pair, base: Path, own: Mapping[str, object]) -> Pair:
    if canonical(pair.dataset) in KNOWN_DATASETS or pair.dataset in own:
        return pair
    return Pair(seed=pair.seed, dataset=str((base / pair.dataset).expanduser().resolve()))


def check_plan(plan: Plan, registry: SuiteRegistry, base: Path) -> list[str]:
    """Checks that need the outside world: suites, rounds, datasets, slot shape, env values."""
    return (_check_suites(plan, registry) + _check_sweeps(plan) + after_problems(plan, registry)
            + _check_datasets(plan, base) + _check_slots(plan) + _check_env(plan))


def _check_sweeps(plan: Plan) -> list[str]:
    problems = read_sweep(plan.sweep)[1]
    for i, ref in enumerate(plan.suites):
        problems += read_sweep(ref.sweep, f"suites[{i}].sweep")[1]
    return problems


def _check_suites(plan: Plan, registry: SuiteRegistry) -> list[str]:
    problems: list[str] = []
    for i, ref in enumerate(plan.suites):
        try:
            suite = registry.get(ref.name)
        except LatError as exc:
            problems.append(f"field 'suites[{i}]': {exc}")
            continue
        if ref.rounds != "all":
            missing = [r for r in ref.rounds if r not in suite.rounds]
            if missing:
                have = ", ".join(str(r) for r in sorted(suite.rounds))
                problems.append(
                    f"field 'suites[{i}].rounds': suite {ref.name!r} has no round {missing[0]} (rounds: {have})"
                )
    return problems


def _check_datasets(plan: Plan, base: Path) -> list[str]:
    found: list[Found] = []
    for i, pair in enumerate(plan.pairs):
        problem = None if pair.dataset in plan.datasets else check_dataset(pair.dataset, base)
        if problem:
            alone = f"field 'pairs[{i}]' ({pair}): {problem}"
            found.append(Found(f"pairs[{i}]", problem, alone, shorten(str(pair), 80)))
    return problem_lines(found)


def _check_slots(plan: Plan) -> list[str]:
    if plan.slots == "auto":
        return []
    slots = plan.slots if isinstance(plan.slots, list) else [plan.slots]
    if any(s < 0 for s in slots):
        return ["field 'slots': slot counts must be >= 0"]
    devices = 1 if plan.gpus == "cpu" else len(plan.gpus)
    if isinstance(plan.slots, list) and len(plan.slots) != devices:
        what = "the CPU" if plan.gpus == "cpu" else f"{devices} GPUs {plan.gpus}"
        return [f"field 'slots': expected one number or {devices} (one per device) for {what}, got {len(plan.slots)}"]
    if sum(slots) == 0:
        return ["field 'slots': every device has 0 slots, so no job could ever start"]
    return []


def _check_env(plan: Plan) -> list[str]:
    problems: list[str] = []
    for key, value in plan.env.items():
        if not is_valid_name(key):
            problems.append(f"field 'env': {key!r} is not a valid environment variable name")
        elif key in ENV_FIELDS or key in TRACKER_SWITCHES:
            try:
                parse_env_value(key, value)
            except ValueError as exc:
                problems.append(f"field 'env.{key}': {exc}")
    # read by the trainer, not a config field: checked as the trainer reads them
    problems += [f"field 'env.{exc.name}': {exc}" for exc in kernel_tunings.problems(plan.env)]
    return problems


def _pydantic_problems(exc: ValidationError) -> list[str]:
    return problem_lines([_found(err) for err in exc.errors()])


def _found(err: ErrorDetails) -> Found:
    loc = _format_loc(err["loc"])
    if err["type"] == "extra_forbidden":
        return Found(loc, "unknown field", f"unknown field {loc!r}", loc)
    if err["type"] == "missing":
        return Found(loc, "is required", f"field {loc!r} is required", loc)
    msg = err["msg"].removeprefix("Value error, ")
    got = shorten(repr(err.get("input")), 80)
    return Found(loc, msg, f"field {loc!r}: {msg} (got {got})", f"{loc}={got}")


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in {"list[int]", "literal['all']", "list[Pair]", "int", "literal['cpu']", "str", "float"}:
            continue  # union branch names: noise for a user
        else:
            out += f".{part}" if out else str(part)
    return out

