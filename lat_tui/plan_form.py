"""From the plan form's raw values to a started run; no Textual here, so it is easy to test.

Every problem is collected and shown at once; nothing is written to the journal unless the whole
plan validates and its jobs expand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lat_core.config.suites import SuiteRegistry
from lat_core.errors import LatError, PlanError
from lat_core.monitor.gpu import GpuProbe
from lat_core.plan import Plan, plan_from_mapping
from lat_core.client import Client

CPU = "cpu"
WHERE = "plan form"


@dataclass(frozen=True)
class PlanForm:
    suites: list[str]
    rounds: str
    pairs: str
    devices: list  # GPU indices, or CPU
    slots: str
    countdown: str
    output_root: str
    env: str


def form_to_mapping(form: PlanForm) -> tuple[dict, list[str]]:
    """The plan mapping, and the problems the plan model cannot word well itself."""
    problems = []
    if not form.suites:
        problems.append("field 'suites': select at least one suite (space toggles)")
    if not form.devices:
        problems.append("field 'gpus': select at least one GPU, or cpu")
    elif CPU in form.devices and len(form.devices) > 1:
        problems.append("field 'gpus': select GPUs or cpu, not both")
    env, env_problems = parse_env(form.env)
    mapping = {
        "suites": [{"name": name, "rounds": form.rounds.strip() or "all"} for name in form.suites],
        "pairs": form.pairs,
        "gpus": CPU if CPU in form.devices or not form.devices else list(form.devices),
        "slots": form.slots.strip() or "1",
        "output_root": form.output_root.strip() or "runs",
        "env": env,
    }
    if form.countdown.strip():
        mapping["countdown_minutes"] = form.countdown.strip()
    return mapping, problems + env_problems


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
    """One line per problem, for the form's error box."""
    if isinstance(error, PlanError):
        return list(error.problems)
    return [str(error)]
