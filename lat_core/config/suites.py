"""Suites: named sets of experiment configs grouped into rounds (``suites/<NAME>.yaml`` of a config tree).

A suite file looks like::

    name: demo
    description: tiny GLA and Mamba LoRA jobs
    rounds:
      1: [gla/tiny_lora_qkvo.yaml, mamba/tiny_lora.yaml]

Config paths are relative to ``experiments/``, looked up in the user's tree first, then the shipped
one (``lat_core.config.paths``). A config may repeat inside a round (the jobs get a ``__repK``
suffix) - the seeds use that for variance runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lat_core.config.paths import USER, ConfigTree, find_in_trees
from lat_core.config.yaml_files import YamlFileError, YamlMapping, read_yaml_mapping
from lat_core.errors import SuiteError

GIVEN = "given"  # origin of a tree passed as a bare path (tests, tools)


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    rounds: dict[int, tuple[Path, ...]]
    path: Path
    origin: str = GIVEN

    def configs_for(self, rounds: "list[int] | None") -> list[tuple[int, Path]]:
        """(round, config path) pairs for the chosen rounds (None = all), in round order."""
        chosen = sorted(self.rounds) if rounds is None else rounds
        return [(r, cfg) for r in chosen for cfg in self.rounds[r]]


@dataclass(frozen=True)
class SuiteEntry:
    """One available suite name: the file that wins and which tree it comes from."""
    name: str
    origin: str
    path: Path
    shadows: tuple[Path, ...]  # same-named suites of later trees that this one hides


class SuiteRegistry:
    """Reads suites lazily from config trees (the first tree's names win); every problem names the
    suite file. A bare path is one tree."""

    def __init__(self, trees: "Path | str | Sequence[ConfigTree]"):
        if isinstance(trees, (str, Path)):
            trees = (ConfigTree(Path(trees), GIVEN),)
        self.trees: tuple[ConfigTree, ...] = tuple(trees)
        self._cache: dict[str, Suite] = {}

    def entries(self) -> list[SuiteEntry]:
        found: dict[str, list[tuple[str, Path]]] = {}
        for tree in self.trees:
            folder = tree.path / "suites"
            for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
                found.setdefault(path.stem, []).append((tree.origin, path))
        return [SuiteEntry(name, hits[0][0], hits[0][1], tuple(p for _, p in hits[1:]))
                for name, hits in sorted(found.items())]

    def names(self) -> list[str]:
        return [entry.name for entry in self.entries()]

    def get(self, name: str) -> Suite:
        if name not in self._cache:
            self._cache[name] = self._load(name)
        return self._cache[name]

    def pin_user_peft_spec(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with a named ``peft.spec`` that a user tree defines replaced by that file's
        path, so the trainer (another process, which knows only the shipped tree) loads the user's."""
        peft = config.get("peft")
        if not isinstance(peft, dict):
            return config
        name = peft.get("spec")
        user = [t for t in self.trees if t.origin == USER]
        if not isinstance(name, str) or not name or not user:
            return config
        found = next((p for ext in (".yaml", ".yml", ".json")
                      if (p := find_in_trees(user, "peft", f"{name}{ext}")) is not None), None)
        return config if found is None else {**config, "peft": {**peft, "spec": str(found)}}

    def _load(self, name: str) -> Suite:
        entry = next((e for e in self.entries() if e.name == name), None)
        if entry is None:
            known = ", ".join(self.names()) or "none"
            where = " or ".join(str(t.path / "suites") for t in self.trees)
            raise SuiteError(f"unknown suite {name!r} (known suites: {known})", where=where)
        data = _read_yaml_mapping(entry.path)
        rounds = _parse_rounds(data.get("rounds"), entry.path, self.trees)
        return Suite(name, str(data.get("description", "")), rounds, entry.path, entry.origin)


def _read_yaml_mapping(path: Path) -> YamlMapping:
    try:
        return read_yaml_mapping(path, "a mapping with 'rounds'")
    except YamlFileError as exc:
        raise SuiteError(exc.message, where=exc.where) from None


def _parse_rounds(raw: object, path: Path, trees: Sequence[ConfigTree]) -> dict[int, tuple[Path, ...]]:
    if not isinstance(raw, dict) or not raw:
        raise SuiteError("field 'rounds': expected a mapping of round number to config list", where=str(path))
    rounds: dict[int, tuple[Path, ...]] = {}
    for key, configs in raw.items():
        try:
            number = int(key)
        except (TypeError, ValueError):
            raise SuiteError(f"field 'rounds': round {key!r} is not a number", where=str(path)) from None
        if not isinstance(configs, list) or not configs:
            raise SuiteError(f"field 'rounds.{key}': expected a non-empty list of config files", where=str(path))
        rounds[number] = tuple(_resolve_config(c, path, trees) for c in configs)
    return rounds


def _resolve_config(entry: object, path: Path, trees: Sequence[ConfigTree]) -> Path:
    if not isinstance(entry, str) or not entry.endswith((".yaml", ".yml")):
        raise SuiteError(f"config entry {entry!r}: expected a .yaml path", where=str(path))
    found = find_in_trees(trees, "experiments", entry)
    if found is None:
        where = " or ".join(str(t.path / "experiments") for t in trees)
        raise SuiteError(f"config {entry!r} not found under {where}", where=str(path))
    return found
