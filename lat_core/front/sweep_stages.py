"""A two-stage search over a sweep's points (the seeds' own procedure: tune on a part, then run the
winners in full)::

    sweep:
      grid: {train.lr: [1e-4, 2e-4, 5e-4, 1e-3]}
      stages:
        screen: {train.data_fraction: 0.25, train.max_steps: 100}   # stage 1: fields set for it
        promote: 2                                                   # stage 2: the 2 best points

Stage 1 runs every point once per dataset (with the first seed the pairs give it) with the
``screen`` fields laid over its config; stage 2 runs the ``promote`` points that scored best on the
main validation metric in full, with every pair. The stage-2 jobs are planned and written with the
run, held until every stage-1 job of their search has ended (a failed one ranks last, it does not
stop stage 2), and the engine then promotes the best and prunes the others
(:mod:`lat_core.engine.promotion`), saying why in the run's history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lat_core.front.sweep_fields import field_problem, target

if TYPE_CHECKING:  # sweep.py imports this module when a sweep has stages
    from lat_core.front.sweep import Sweep, Value

STAGE_KEYS = ("screen", "promote")
SCREEN_SUFFIX = "screen"  # a stage-1 job's folder: <config>__<point>__screen


@dataclass(frozen=True)
class Stages:
    screen: tuple[tuple[str, Value], ...]  # what stage 1 sets on each point, over everything else
    promote: int  # how many points stage 2 runs


def read_stages(raw: object, where: str, sweep: Sweep, problems: list[str]) -> Stages | None:
    """The stages ``raw`` describes (problems appended, each naming its field under ``where``)."""
    if not isinstance(raw, dict):
        problems.append(f"field {where!r}: expected a mapping with screen and promote, got {_kind(raw)}")
        return None
    problems += [f"field '{where}.{k}': unknown field (expected screen, promote)" for k in raw if k not in STAGE_KEYS]
    screen = _screen(raw.get("screen"), f"{where}.screen", sweep, problems)
    promote = _promote(raw.get("promote"), f"{where}.promote", sweep, problems)
    if screen is None or promote is None:
        return None
    return Stages(screen, promote)


def _screen(raw: object, where: str, sweep: Sweep, problems: list[str]) -> tuple[tuple[str, Value], ...] | None:
    from lat_core.front.sweep import parse_value

    if not isinstance(raw, dict) or not raw:
        problems.append(f"field {where!r}: expected a mapping of field: value that stage 1 sets "
                        f"(train.data_fraction: 0.25, train.max_steps: 100), got {_kind(raw)}")
        return None
    swept = {target(f) for f in sweep.fields()}
    values, bad = [], False
    for field, value in raw.items():
        problem = field_problem(str(field))
        if problem is None and target(str(field)) in swept:
            problem = f"{target(str(field))} is swept: stage 1 would not train each point's own value"
        try:
            read = parse_value(value)
        except ValueError as exc:
            problem = problem or str(exc)
        if problem is not None:
            problems.append(f"field '{where}.{field}': {problem}")
            bad = True
        else:
            values.append((str(field), read))
    return None if bad else tuple(values)


def _promote(raw: object, where: str, sweep: Sweep, problems: list[str]) -> int | None:
    points = sweep.count() if sweep.fields() else 0
    if points < 2:
        problems.append(f"field {where!r}: a two-stage search ranks a sweep's points, and this sweep has "
                        f"{points}: add grid, zip or random")
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw < points:
        problems.append(f"field {where!r}: expected a whole number from 1 to {points - 1} (the sweep has "
                        f"{points} points; stage 2 runs the best of them), got {raw!r}")
        return None
    return raw


def _kind(value: object) -> str:
    return f"{type(value).__name__} {str(value)[:60]!r}" if value is not None else "nothing"
