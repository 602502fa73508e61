"""From the plan form's raw values to a started run; no Textual here, so it is easy to test.

Every problem is collected and shown at once; nothing is written to the journal unless the whole
plan validates and its jobs expand.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from lat_core.contract.saved_plan import SavedPlan
from lat_core.errors import LatError, PlanError
from lat_core.front.client import MASK, PLAN_DEFAULTS, Client, GpuProbe, Plan, SuiteRegistry, plan_from_mapping
from lat_tui import sweep_words

CPU = "cpu"
WHERE = "plan form"
WARM_START, ALLOW_CPU = "warm_start", "allow_cpu"  # the plan's switches the form's Options list holds
MAX_RETRIES = "max_retries="  # an On OOM word that is not a remedy
FUSE_WORDS = {"auto": "auto", "yes": True, "true": True, "no": False, "false": False}


@dataclass(frozen=True)
class PlanForm:
    """The form's raw values; a field left empty means the plan's default."""
    suites: list[str]
    rounds: str
    pairs: str
    devices: list  # GPU indices, or CPU
    slots: str
    countdown: str
    output_root: str
    env: str
    fuse: str = ""  # auto, yes or no
    switches: list[str] = field(default_factory=lambda: default_switches())  # WARM_START, ALLOW_CPU: on
    on_oom: str = ""  # remedies, and max_retries=N
    overrides: str = ""  # FIELD=VALUE words, e.g. train.lr=0.001
    sweep: str = ""  # FIELD=V1,V2 words as --sweep takes them (lat_tui.sweep_words), zip:/random: prefixed
    # a last run's two-stage search or halving, which the Sweep field's words cannot hold: kept with its points
    sweep_search: Mapping[str, Any] = field(default_factory=dict)


def default_switches() -> list[str]:
    """The switches a plan that names none has on."""
    return [name for name in (WARM_START, ALLOW_CPU) if getattr(PLAN_DEFAULTS, name)]


EMPTY_FORM = PlanForm(suites=[], rounds="", pairs="", devices=[], slots="", countdown="", output_root="", env="")


def form_from_saved_plan(plan: SavedPlan) -> PlanForm:
    """A run's saved plan as the form's fields, to start the next run from the last one; masked
    secrets are left out (their values are not in the journal). A damaged plan gives an empty form."""
    if plan.problem:
        return EMPTY_FORM
    rounds = {_words(s.rounds) for s in plan.suites}
    return PlanForm(
        suites=[s.name for s in plan.suites],
        rounds=rounds.pop() if len(rounds) == 1 else "",
        pairs=_words(plan.pairs),
        devices=[CPU] if plan.gpus == CPU else list(plan.gpus),
        slots=_words(plan.slots),
        countdown=f"{plan.countdown_minutes:g}" if plan.countdown_minutes else "",
        output_root=plan.output_root,
        env=" ".join(f"{k}={v}" for k, v in plan.env.items() if v != MASK),
        fuse="" if plan.fuse == PLAN_DEFAULTS.fuse else ("yes" if plan.fuse is True else "no"),
        switches=[name for name in (WARM_START, ALLOW_CPU) if getattr(plan, name)],
        on_oom=_on_oom_words(plan),
        overrides=" ".join(override_words(plan.overrides)),
        sweep=sweep_words.to_text(dict(plan.sweep)),
        sweep_search={part: sweep_words.plain(plan.sweep[part]) for part in sweep_words.untyped_parts(dict(plan.sweep))},
    )


def _on_oom_words(plan: SavedPlan) -> str:
    if plan.on_oom is None:
        return ""
    retries = [] if plan.on_oom.max_retries == PLAN_DEFAULTS.max_retries else [f"{MAX_RETRIES}{plan.on_oom.max_retries}"]
    return " ".join([*plan.on_oom.remedies, *retries])


def override_words(overrides: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``{train: {lr: 0.001}}`` as ``train.lr=0.001``: the Overrides field's words (quoted where a
    value has spaces)."""
    words = []
    for key, value in overrides.items():
        if isinstance(value, Mapping) and value:
            words += override_words(value, f"{prefix}{key}.")
        else:
            words.append(shlex.quote(f"{prefix}{key}={_value_text(value)}"))
    return words


def _value_text(value: object) -> str:
    """A value as the field reads it back: a string that YAML reads as itself stays bare."""
    if isinstance(value, str):
        try:
            if yaml.safe_load(value) == value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value)  # JSON is YAML's flow style: numbers, lists and quoted strings read back


def _words(value: object) -> str:
    return " ".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


def form_to_mapping(form: PlanForm) -> tuple[dict, list[str]]:
    """The plan mapping, and the problems the plan model cannot word well itself."""
    problems = []
    if not form.suites:
        problems.append("field 'suites': pick at least one suite (space toggles)")
    if not form.devices:
        problems.append("field 'gpus': pick at least one GPU, or cpu")
    elif CPU in form.devices and len(form.devices) > 1:
        problems.append("field 'gpus': pick GPUs or cpu, not both")
    env, env_problems = parse_env(form.env)
    mapping = {
        "suites": [{"name": name, "rounds": form.rounds.strip() or "all"} for name in form.suites],
        "pairs": form.pairs,
        "gpus": CPU if CPU in form.devices or not form.devices else list(form.devices),
        "slots": form.slots.strip() or "auto",
        "output_root": form.output_root.strip() or "runs",
        "env": env,
    }
    if form.countdown.strip():
        mapping["countdown_minutes"] = form.countdown.strip()
    fuse = form.fuse.strip().lower()
    if fuse in FUSE_WORDS:
        mapping["fuse"] = FUSE_WORDS[fuse]
    elif fuse:
        problems.append(f"field 'fuse': expected auto, yes or no (got {form.fuse.strip()!r})")
    mapping.update({name: name in form.switches for name in (WARM_START, ALLOW_CPU)})
    if form.on_oom.strip():
        mapping["on_oom"] = parse_on_oom(form.on_oom)
    overrides, override_problems = parse_overrides(form.overrides)
    if overrides:
        mapping["overrides"] = overrides
    sweep, sweep_problems = sweep_words.to_mapping(sweep_words.from_text(form.sweep), SWEEP_NAMES)
    if sweep:
        mapping["sweep"] = {**sweep, **form.sweep_search}
    return mapping, problems + env_problems + override_problems + sweep_problems


SWEEP_NAMES = dict.fromkeys((sweep_words.GRID, sweep_words.ZIP, sweep_words.RANDOM, sweep_words.DRAWS), "field 'sweep':")


def parse_on_oom(text: str) -> dict[str, object]:
    """``smaller_micro_batch expandable_segments max_retries=3``: the remedies in the order to try
    them, and how often (the plan model checks both)."""
    words = text.split()
    on_oom: dict[str, object] = {"remedies": [w for w in words if not w.startswith(MAX_RETRIES)]}
    for word in words:
        if word.startswith(MAX_RETRIES):
            on_oom["max_retries"] = word.removeprefix(MAX_RETRIES)
    return on_oom


def parse_overrides(text: str) -> tuple[dict[str, Any], list[str]]:
    """``train.lr=0.001 peft.target_modules=[q_proj,v_proj]``: config fields set for every job, each
    value read as YAML (a number is a number); the jobs' config schema checks them at expansion."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        return {}, [f"field 'overrides': {exc}"]
    overrides: dict[str, Any] = {}
    problems = []
    for word in words:
        path, sep, value = word.partition("=")
        keys = path.split(".")
        if not sep or not all(keys):
            problems.append(f"field 'overrides': {word!r}: expected FIELD=VALUE, e.g. train.lr=0.001")
            continue
        try:
            parsed = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            parsed = value  # not YAML: the text as it is (the config schema says if it will not do)
        node = overrides
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}  # a later word's section replaces an earlier word's value
            node = node[key]
        node[keys[-1]] = parsed
    return overrides, problems


def validate_form(form: PlanForm, registry: SuiteRegistry) -> Plan:
    """The plan, or PlanError listing every problem of the form at once."""
    mapping, problems = form_to_mapping(form)
    try:
        plan = plan_from_mapping(mapping, registry, where=WHERE)
    except PlanError as exc:
        covered = {p.split(":", 1)[0] for p in problems}
        problems += [p for p in exc.problems if not any(p.startswith(c) for c in covered)]
        raise PlanError(problems, where=WHERE) from None
    if problems:
        raise PlanError(problems, where=WHERE)
    return plan


def parse_env(text: str) -> tuple[dict[str, str], list[str]]:
    """``KEY=VALUE`` words separated by spaces."""
    env, problems = {}, []
    for word in text.split():
        key, sep, value = word.partition("=")
        if not sep or not key:
            problems.append(f"field 'env': {word!r}: expected KEY=VALUE")
        else:
            env[key] = value
    return env, problems


def start_run(form: PlanForm, state_dir: Path, registry: SuiteRegistry, probe: GpuProbe,
              engine_starter: Callable[..., object]) -> int:
    """Validate, write the run into the journal, make sure an engine drains it; the run id."""
    plan = validate_form(form, registry)
    run, _ = Client(state_dir).new_run(plan, registry=registry, probe=probe)
    engine_starter(state_dir, extra_env=plan.env)
    return run.id


def problem_lines(error: LatError) -> list[str]:
    """One line per problem, for the form's error box, in the form's words."""
    if isinstance(error, PlanError):
        return [human_problem(problem) for problem in error.problems]
    return [str(error)]


# The plan model's field names as the form labels them.
FIELD_LABELS = {"suites": "Suites", "rounds": "Rounds", "pairs": "Pairs", "gpus": "Devices", "slots": "Slots",
                "countdown_minutes": "Countdown", "output_root": "Output", "env": "Env", "fuse": "Fuse",
                "warm_start": "Options", "allow_cpu": "Options", "on_oom": "On OOM", "remedies": "On OOM",
                "max_retries": "On OOM", "overrides": "Overrides", "sweep": "Sweep"}
# a sweep's problem names its field under the part (sweep.grid.train.lr): the form says the field typed
SWEEP_PATH = re.compile(r"^sweep\.(?:grid\.|zip\.|random\.space\.)?(?P<rest>.+)$")
SWEEP_WORDS = {"random.n": "draws", "random.seed": "seed"}
# pydantic's messages as a researcher would say them, by field ("" for any field).
PHRASES = (
    ("pairs", r"List should have at least 1 item.*?(?= \(got|$)", "give at least one seed:dataset pair, e.g. 1:tiny-sst2"),
    ("suites", r"List should have at least 1 item.*?(?= \(got|$)", "pick at least one suite (space toggles)"),
    ("", r"List should have at least 1 item.*?(?= \(got|$)", "give at least one value"),
    ("countdown_minutes", r"Input should be a valid number.*?(?= \(got|$)", "must be a number of minutes"),
    ("", r"Input should be a valid (number|integer).*?(?= \(got|$)", "must be a number"),
    ("", r"Input should be greater than or equal to (\S+)", r"must be \1 or more"),
    ("", r"Input should be less than or equal to (\S+)", r"must be at most \1"),
    ("", r"String should have at least 1 character", "must not be empty"),
)
FIELD_PROBLEM = re.compile(r"field '(?P<field>[^']+)': (?P<text>.*)", re.DOTALL)


def human_problem(problem: str) -> str:
    """``field 'countdown_minutes': Input should be ... (got 'zz')`` -> ``Countdown: must be a
    number of minutes (got 'zz')``; a problem in another shape is kept as it is."""
    match = FIELD_PROBLEM.fullmatch(problem)
    if not match:
        return problem
    field_path, text = match["field"], match["text"]
    field = re.sub(r"\[\d+\]", "", field_path).split(".")[-1]
    for only, pattern, replacement in PHRASES:
        if only in ("", field):
            text, count = re.subn(pattern, replacement, text, count=1)
            if count:
                break
    text = re.sub(r" \(got (\[\]|''|\"\")\)$", "", text)  # nothing was given: saying so is noise
    return f"{_label(field, field_path)}: {text}"


def _label(field: str, field_path: str) -> str:
    """The form's name for a field: ``Sweep (train.lr)`` for a sweep's field, else its label."""
    swept = SWEEP_PATH.match(field_path)
    if swept:
        return f"{FIELD_LABELS['sweep']} ({SWEEP_WORDS.get(swept['rest'], swept['rest'])})"
    return FIELD_LABELS.get(field, field_path)
