"""A sweep typed as words, on the command line or in the plan form, as the plan's ``sweep:`` mapping.

    FIELD=V1,V2,...          a list of values: a grid's, a zip's or a random draw's choices
    FIELD=KIND:LOW,HIGH      a range to draw from (random only): uniform, log_uniform, int_uniform

The command line gives each part its flag (``--sweep`` the grid, ``--sweep-zip``, ``--sweep-random``
with ``--sweep-draws N`` and ``--sweep-seed S``); the plan form's Sweep field takes the same words,
a zip's and a random space's prefixed (``zip:FIELD=...``, ``random:FIELD=...``, ``draws=N``,
``seed=S``). Only the words are read here; the plan's own checks (lat_core.front.sweep) judge the
fields, values and ranges, naming the field, so the two ways in say the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

GRID, ZIP, RANDOM = "grid", "zip", "random"
DRAWS, SEED = "draws", "seed"  # the form's words for random's n and seed
_RANGE = re.compile(r"^(?P<kind>[a-z_]+):(?P<ends>.*)$")
_EXPONENT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")  # 1e-5: a number, though YAML 1.1 reads text
AXIS_HINT = "expected FIELD=VALUE,VALUE,... (train.lr=1e-4,2e-4)"
SPACE_HINT = "expected FIELD=VALUE,VALUE,... or FIELD=KIND:LOW,HIGH (train.lr=log_uniform:1e-5,1e-3)"


@dataclass
class SweepWords:
    """A sweep's words part by part: ``grid``, ``zips`` and ``space`` hold ``FIELD=...`` words."""

    grid: list[str] = field(default_factory=list)
    zips: list[str] = field(default_factory=list)
    space: list[str] = field(default_factory=list)
    draws: Any = None  # random's n, as given (the plan's check says what is wrong with it)
    seed: Any = None

    def __bool__(self) -> bool:
        return bool(self.grid or self.zips or self.space or self.draws is not None or self.seed is not None)


def scalar(text: str) -> object:
    """A value as YAML reads it (8, true, text); anything but a scalar stays the text it was."""
    import yaml  # on first use: `lat-tui --help` never loads it

    if _EXPONENT.match(text.strip()):
        return float(text)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text.strip()
    return value if isinstance(value, (bool, int, float, str)) else text.strip()


def _split(word: str) -> tuple[str, str] | None:
    key, sep, values = word.partition("=")
    return (key.strip(), values.strip()) if sep and key.strip() and values.strip() else None


def axis(word: str) -> tuple[str, list[object]] | None:
    """``train.lr=1e-4,2e-4`` -> ``("train.lr", [...])``; None when it is not that shape."""
    split = _split(word)
    return (split[0], [scalar(v) for v in split[1].split(",")]) if split else None


def space_entry(word: str) -> tuple[str, object] | None:
    """A random space's entry: a list of choices, or ``{KIND: [LOW, HIGH]}`` for ``KIND:LOW,HIGH``."""
    split = _split(word)
    if split is None:
        return None
    name, values = split
    ranged = _RANGE.match(values)
    if ranged:
        return name, {ranged["kind"]: [scalar(v) for v in ranged["ends"].split(",")]}
    return name, [scalar(v) for v in values.split(",")]


def to_mapping(words: SweepWords, name: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The ``sweep:`` mapping of ``words`` and the problems of words not of the expected shape,
    each named by ``name[part]`` (a flag, or the form's field)."""
    problems: list[str] = []
    sweep: dict[str, Any] = {}
    for part, given, read, hint in ((GRID, words.grid, axis, AXIS_HINT), (ZIP, words.zips, axis, AXIS_HINT)):
        if given:
            sweep[part] = _entries(given, read, f"{name[part]} {{word!r}}: {hint}", problems)
    if words.space or words.draws is not None or words.seed is not None:
        random: dict[str, Any] = {"n": words.draws, "seed": words.seed}
        if words.space:
            random["space"] = _entries(words.space, space_entry, f"{name[RANDOM]} {{word!r}}: {SPACE_HINT}", problems)
        sweep[RANDOM] = {key: value for key, value in random.items() if value is not None}
    return sweep, problems


def merged(plan: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """A plan file's ``sweep:`` with the words' parts added (and winning): a grid's or zip's
    fields, a random space's fields, its n and seed."""
    out = dict(plan)
    for part in (GRID, ZIP):
        if part in given:
            out[part] = {**_mapping(plan.get(part)), **given[part]}
    if RANDOM in given:
        before, now = _mapping(plan.get(RANDOM)), given[RANDOM]
        out[RANDOM] = {**before, **now, "space": {**_mapping(before.get("space")), **now.get("space", {})}}
    return out


def _mapping(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _entries(words: Iterable[str], read: Any, problem: str, problems: list[str]) -> dict[str, object]:
    entries: dict[str, object] = {}
    for word in words:
        entry = read(word)
        if entry is None:
            problems.append(problem.format(word=word))
        else:
            entries[entry[0]] = entry[1]
    return entries


def from_text(text: str) -> SweepWords:
    """The plan form's Sweep field: ``train.lr=1e-4,2e-4 zip:HP_MAX_STEPS=40,80 random:peft.dropout=
    uniform:0,0.2 draws=8 seed=0``. A word that is none of these is kept as a grid word (its check
    says what is wrong)."""
    words = SweepWords()
    for word in text.split():
        part, sep, rest = word.partition(":")
        if sep and part in (ZIP, RANDOM):
            (words.zips if part == ZIP else words.space).append(rest)
        elif word.startswith(f"{DRAWS}="):
            words.draws = scalar(word.removeprefix(f"{DRAWS}="))
        elif word.startswith(f"{SEED}="):
            words.seed = scalar(word.removeprefix(f"{SEED}="))
        else:
            words.grid.append(word)
    return words


def plain(value: Any) -> Any:
    """A saved plan's value (read-only mappings, tuples) as the plain dicts and lists a plan is made of."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    return [plain(item) for item in value] if isinstance(value, (list, tuple)) else value


def to_text(sweep: dict[str, Any]) -> str:
    """A saved plan's ``sweep:`` as the form's words (its grid, zip and random parts; a two-stage
    search's or halving's settings have no words: :func:`untyped_parts` names them)."""
    sweep = plain(sweep)
    words = [f"{f}={_values_text(v)}" for f, v in (sweep.get(GRID) or {}).items()]
    words += [f"{ZIP}:{f}={_values_text(v)}" for f, v in (sweep.get(ZIP) or {}).items()]
    random = sweep.get(RANDOM) or {}
    for name, spec in (random.get("space") or {}).items():
        if isinstance(spec, dict) and len(spec) == 1:
            kind, ends = next(iter(spec.items()))
            words.append(f"{RANDOM}:{name}={kind}:{_values_text(ends)}")
        else:
            words.append(f"{RANDOM}:{name}={_values_text(spec)}")
    if random:
        words += [f"{DRAWS}={random.get('n')}"] + ([f"{SEED}={random['seed']}"] if "seed" in random else [])
    return " ".join(words)


def untyped_parts(sweep: dict[str, Any]) -> list[str]:
    """The parts of a saved sweep the form's words cannot hold (stages, halving)."""
    return [part for part in sweep if part not in (GRID, ZIP, RANDOM)]


def _values_text(values: object) -> str:
    """``1e-4,2e-4``: values as a sweep's folders name them, which read back as the same values."""
    from lat_core.front.client import value_text

    return ",".join(value_text(v) for v in (values if isinstance(values, list) else [values]))
