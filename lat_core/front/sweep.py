"""Sweeps: ``sweep:`` in a plan (or in one of its suite entries) makes one job per point of a
hyperparameter space, for every config and pair::

    sweep:
      grid:                                   # every combination: 3 x 2 = 6 points
        train.lr: [1.0e-4, 2.0e-4, 5.0e-4]
        peft.r: [8, 16]
      zip:                                    # lists in step: point i takes the i-th of each
        train.warmup_steps: [0, 10]
        train.max_steps: [40, 80]
      random:                                 # n distinct draws, the same ones for the same seed
        n: 8
        seed: 0
        space:
          train.lr: {log_uniform: [1.0e-5, 1.0e-3]}
          peft.dropout: {uniform: [0.0, 0.2]}
          train.batch_size: {int_uniform: [4, 16]}
          peft.alpha: [8, 16, 32]             # a list: one of its values

The parts present multiply (a grid of 6 with a zip of 2 is 12 points). A field is a dotted job-config
field (``train.lr``) or one of the seeds' variables (``HP_BATCH_SIZE``); the pair's fields (``data``,
``seed``) and the job's own (``name``, ``output_dir``) are not swept. Text that reads as a number is a
number here (PyYAML reads ``1e-4`` as text). A draw from a range is rounded to 3 significant digits,
so the value a job trains with is the one its folder names. Why the checks are a function and not the
plan's pydantic model: each problem is one line naming its field (``sweep.grid.train.lr``), as the
plan's other problems are, and the same reading serves the check and the expansion.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Union

from lat_core.front.sweep_fields import field_label, field_problem, target
from lat_core.text import value_text

from lat_core.front.sweep_halving import HalvingRule, read_halving

if TYPE_CHECKING:  # sweep_stages reads values as this module does
    from lat_core.front.sweep_stages import Stages

MAX_POINTS = 10_000  # points of one sweep: beyond, a typo (a grid of ten 10-value lists) not a plan
ROUND_DIGITS = 3  # significant digits of a value drawn from a range
PARTS = ("grid", "zip", "random")
SEARCHES = ("stages", "halving")  # how the points are run (lat_core.front.sweep_stages), beside the parts that make them
SPANS = ("uniform", "log_uniform", "int_uniform")
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_TRIES_PER_DRAW = 50  # random draws tried per wanted point before the space counts as too small

Value = Union[bool, int, float, str, None, tuple[Any, ...]]


@dataclass(frozen=True)
class Axis:
    """One swept field and its values (a grid's or a zip's)."""
    field: str
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Span:
    """A range to draw from: ``uniform``, ``log_uniform`` (both rounded) or ``int_uniform`` (ends included)."""
    kind: str
    low: float
    high: float

    def draw(self, rng: random.Random) -> Value:
        if self.kind == "int_uniform":
            return rng.randint(int(self.low), int(self.high))
        if self.kind == "log_uniform":
            return _rounded(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return _rounded(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class Draws:
    """``random:``: ``n`` distinct points, each field drawn in the order written."""
    n: int
    seed: int
    space: tuple[tuple[str, Union[Span, tuple[Value, ...]]], ...]

    def points(self) -> list[tuple[tuple[str, Value], ...]]:
        """The draws, or fewer where the space holds fewer distinct points (:func:`read_sweep` says so)."""
        rng, found = random.Random(self.seed), dict[tuple[tuple[str, Value], ...], None]()
        for _ in range(self.n * _TRIES_PER_DRAW):
            if len(found) == self.n:
                break
            found.setdefault(tuple((f, spec.draw(rng) if isinstance(spec, Span) else rng.choice(spec))
                                   for f, spec in self.space), None)
        return list(found)


@dataclass(frozen=True)
class Point:
    """The values one job sets, and its name (``lr2e-4_r16``): what its folder is called."""
    values: tuple[tuple[str, Value], ...]
    name: str


@dataclass(frozen=True)
class Sweep:
    grid: tuple[Axis, ...] = ()
    zips: tuple[Axis, ...] = ()
    random: Draws | None = None
    stages: Stages | None = None  # a two-stage search over the points (lat_core.front.sweep_stages)
    halving: HalvingRule | None = None  # successive halving of the points (lat_core.front.sweep_halving)

    def fields(self) -> list[str]:
        drawn = [f for f, _ in self.random.space] if self.random else []
        return [a.field for a in self.grid] + [a.field for a in self.zips] + drawn

    def count(self) -> int:
        """How many points, without making them (a bad grid could have billions)."""
        grid = math.prod(len(a.values) for a in self.grid)
        zipped = len(self.zips[0].values) if self.zips else 1
        return grid * zipped * (self.random.n if self.random else 1)

    def points(self) -> list[Point]:
        """Every point, grid first (its first field changing slowest), then zip, then draws."""
        grid = [tuple(zip([a.field for a in self.grid], combo)) for combo in
                itertools.product(*(a.values for a in self.grid))]
        zipped = [tuple((a.field, a.values[i]) for a in self.zips) for i in
                  range(len(self.zips[0].values) if self.zips else 1)]
        drawn = self.random.points() if self.random else [()]
        labels = {f: field_label(f, self.fields()) for f in self.fields()}
        return [Point(values, point_name(values, labels))
                for g, z, d in itertools.product(grid, zipped, drawn) for values in [g + z + d]]


NO_SWEEP = Sweep()
NO_POINT = Point((), "")  # the one point of a plan without a sweep: each config as it is


def points(sweep: Sweep) -> list[Point]:
    """A sweep's points; without one, each config runs once, as it is."""
    return [NO_POINT] if sweep == NO_SWEEP else sweep.points()


def point_name(values: tuple[tuple[str, Value], ...], labels: dict[str, str]) -> str:
    """``lr2e-4_r16``: a number right after its field's label, other values after a dash."""
    parts = []
    for field, value in values:
        text = value_text(value)
        joint = "" if _is_number(value) else "-"
        parts.append(re.sub(r"[^A-Za-z0-9.+-]+", "-", f"{labels[field]}{joint}{text}").strip("-"))
    return "_".join(parts)


def _rounded(value: float) -> float:
    return float(f"{value:.{ROUND_DIGITS}g}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------- reading and checking


def read_sweep(raw: object, where: str = "sweep") -> tuple[Sweep, list[str]]:
    """The sweep a plan's ``sweep:`` mapping describes and its problems (each naming its field under
    ``where``); with problems, the sweep holds what could be read."""
    if raw is None or raw == {}:
        return NO_SWEEP, []
    if not isinstance(raw, dict):
        return NO_SWEEP, [f"field {where!r}: expected a mapping with {', '.join(PARTS)}, got {_kind(raw)}"]
    problems = [f"field '{where}.{k}': unknown part (expected {', '.join(PARTS + SEARCHES)})" for k in raw
                if k not in PARTS + SEARCHES]
    grid = _axes(raw.get("grid"), f"{where}.grid", problems)
    zips = _axes(raw.get("zip"), f"{where}.zip", problems)
    if len({len(a.values) for a in zips}) > 1:
        sizes = ", ".join(f"{a.field}: {len(a.values)}" for a in zips)
        problems.append(f"field '{where}.zip': its lists must have one length, got {sizes}")
    draws = _draws(raw.get("random"), f"{where}.random", problems) if "random" in raw else None
    sweep = Sweep(grid, zips, draws)
    problems += _twice(sweep, where) + _too_many(sweep, where, problems)
    if "stages" in raw:
        from lat_core.front.sweep_stages import read_stages  # it reads values with this module's parse_value
        sweep = replace(sweep, stages=read_stages(raw["stages"], f"{where}.stages", sweep, problems))
    if "halving" in raw:
        sweep = replace(sweep, halving=read_halving(raw["halving"], f"{where}.halving", problems))
        if len(sweep.fields()) == 0:
            problems.append(f"field '{where}.halving': halving races a sweep's points: add grid, zip or random")
    return sweep, problems


def _axes(raw: object, where: str, problems: list[str]) -> tuple[Axis, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        problems.append(f"field {where!r}: expected a mapping of field: [values], got {_kind(raw)}")
        return ()
    axes = []
    for field, values in raw.items():
        if (problem := field_problem(str(field))) is not None:
            problems.append(f"field '{where}.{field}': {problem}")
        elif (read := _values(values, f"{where}.{field}", problems)) is not None:
            axes.append(Axis(str(field), read))
    return tuple(axes)


def _values(raw: object, where: str, problems: list[str]) -> tuple[Value, ...] | None:
    if isinstance(raw, dict):
        problems.append(f"field {where!r}: expected a list of values, got a mapping"
                        " (name a field with dots: train.lr)")
        return None
    if not isinstance(raw, list) or not raw:
        problems.append(f"field {where!r}: expected a non-empty list of values, got {_kind(raw)}")
        return None
    try:
        values = [parse_value(item) for item in raw]
    except ValueError as exc:
        problems.append(f"field {where!r}: {exc}")
        return None
    twice = [v for v, n in _counts(values).items() if n > 1]
    if twice:
        problems.append(f"field {where!r}: value {twice[0]} is listed twice")
        return None
    return tuple(values)


def parse_value(raw: object) -> Value:
    """A value as a job config takes it: text that reads as a number is one; a list is a tuple.
    ValueError for a mapping or a list of lists."""
    if isinstance(raw, str) and _NUMBER.match(raw.strip()):
        number = float(raw)
        return int(raw) if re.fullmatch(r"[-+]?\d+", raw.strip()) else number
    if isinstance(raw, (bool, int, float, str)) or raw is None:
        return raw
    if isinstance(raw, list) and all(not isinstance(v, (list, dict)) for v in raw):
        return tuple(parse_value(v) for v in raw)
    raise ValueError(f"a value must be a number, text, true/false or a list of those, got {_kind(raw)}")


def _counts(values: list[Value]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value_text(value)] = counts.get(value_text(value), 0) + 1
    return counts


def _draws(raw: object, where: str, problems: list[str]) -> Draws | None:
    if not isinstance(raw, dict):
        problems.append(f"field {where!r}: expected a mapping with n, seed and space, got {_kind(raw)}")
        return None
    problems += [f"field '{where}.{k}': unknown field (expected n, seed, space)" for k in raw
                 if k not in ("n", "seed", "space")]
    n = _whole(raw.get("n"), f"{where}.n", 1, MAX_POINTS, problems)
    seed = _whole(raw.get("seed", 0), f"{where}.seed", 0, 2**63 - 1, problems)
    space = raw.get("space")
    if not isinstance(space, dict) or not space:
        problems.append(f"field '{where}.space': expected a mapping of field: [values] or {{uniform, "
                        f"log_uniform or int_uniform: [low, high]}}, got {_kind(space)}")
        return None
    specs = []
    for field, spec in space.items():
        at = f"{where}.space.{field}"
        if (problem := field_problem(str(field))) is not None:
            problems.append(f"field {at!r}: {problem}")
            continue
        read = _span(spec, at, problems) if isinstance(spec, dict) else _values(spec, at, problems)
        if read is not None:
            specs.append((str(field), read))
    if n is None or seed is None or len(specs) < len(space):
        return None
    draws = Draws(n, seed, tuple(specs))
    if (found := len(draws.points())) < n:
        problems.append(f"field '{where}.n': {n} distinct points asked, but its space holds {found}")
    return draws


def _span(raw: dict[Any, Any], where: str, problems: list[str]) -> Span | None:
    if len(raw) != 1 or next(iter(raw)) not in SPANS:
        problems.append(f"field {where!r}: a range is one of {', '.join(SPANS)}: [low, high], got {raw!r}")
        return None
    kind, ends = next(iter(raw.items()))
    numbers = [parse_value(e) for e in ends if not isinstance(e, (list, dict))] if isinstance(ends, list) else []
    if len(numbers) != 2 or not all(_is_number(e) for e in numbers):
        problems.append(f"field '{where}.{kind}': expected [low, high], two numbers, got {ends!r}")
        return None
    low, high = float(numbers[0]), float(numbers[1])  # type: ignore[arg-type]
    problem = _span_problem(kind, low, high, numbers)
    if problem:
        problems.append(f"field '{where}.{kind}': {problem}, got {ends!r}")
        return None
    return Span(kind, low, high)


def _span_problem(kind: str, low: float, high: float, ends: list[Value]) -> str | None:
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        return "expected low < high"
    if kind == "log_uniform" and low <= 0:
        return "a log-uniform range needs low > 0"
    if kind == "int_uniform" and not all(isinstance(e, int) for e in ends):
        return "expected whole numbers"
    return None


def _whole(raw: object, where: str, low: int, high: int, problems: list[str]) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        problems.append(f"field {where!r}: expected a whole number from {low} to {high:,}, got {raw!r}")
        return None
    return raw


def _twice(sweep: Sweep, where: str) -> list[str]:
    """A field swept twice (by two parts, or as itself and through its variable) would take two
    values in one point."""
    targets = [target(f) for f in sweep.fields()]
    return [f"field {where!r}: {f} is swept more than once" for f in dict.fromkeys(targets)
            if targets.count(f) > 1]


def _too_many(sweep: Sweep, where: str, problems: list[str]) -> list[str]:
    if problems or sweep.count() <= MAX_POINTS:
        return []
    return [f"field {where!r}: {sweep.count():,} points (at most {MAX_POINTS:,}); split it into several plans"]


def _kind(value: object) -> str:
    return f"{type(value).__name__} {str(value)[:60]!r}" if value is not None else "nothing"
