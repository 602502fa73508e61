"""Suites: named sets of experiment configs grouped into rounds (``configs/suites/<NAME>.yaml``).

A suite file looks like::

    name: demo
    description: tiny GLA and Mamba LoRA jobs
    rounds:
      1: [gla/tiny_lora_qkvo.yaml, mamba/tiny_lora.yaml]

Config paths are relative to ``configs/experiments/``. A config may repeat inside a round (the
jobs get a ``__repK`` suffix) - the seeds use that for variance runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from lat_core.errors import SuiteError


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    rounds: dict[int, tuple[Path, ...]]
    path: Path

    def configs_for(self, rounds: "list[int] | None") -> list[tuple[int, Path]]:
        """(round, config path) pairs for the chosen rounds (None = all), in round order."""
        chosen = sorted(self.rounds) if rounds is None else rounds
        return [(r, cfg) for r in chosen for cfg in self.rounds[r]]


class SuiteRegistry:
    """Reads suites lazily from one configs root; every problem names the suite file."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.suites_dir = self.root / "suites"
        self.experiments_dir = self.root / "experiments"
        self._cache: dict[str, Suite] = {}

    def names(self) -> list[str]:
        if not self.suites_dir.is_dir():
            return []
        return sorted(p.stem for p in self.suites_dir.glob("*.yaml"))

    def get(self, name: str) -> Suite:
        if name not in self._cache:
            self._cache[name] = self._load(name)
        return self._cache[name]

    def _load(self, name: str) -> Suite:
        path = self.suites_dir / f"{name}.yaml"
        if not path.is_file():
            known = ", ".join(self.names()) or "none"
            raise SuiteError(f"unknown suite {name!r} (known suites: {known})", where=str(self.suites_dir))
        data = _read_yaml_mapping(path)
        rounds = _parse_rounds(data.get("rounds"), path, self.experiments_dir)
        return Suite(name, str(data.get("description", "")), rounds, path)


def _read_yaml_mapping(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SuiteError(f"not valid YAML: {exc}", where=str(path)) from exc
    if not isinstance(data, dict):
        raise SuiteError("expected a mapping with 'rounds'", where=str(path))
    return data


def _parse_rounds(raw, path: Path, experiments_dir: Path) -> dict[int, tuple[Path, ...]]:
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
        rounds[number] = tuple(_resolve_config(c, path, experiments_dir) for c in configs)
    return rounds


def _resolve_config(entry, path: Path, experiments_dir: Path) -> Path:
    if not isinstance(entry, str) or not entry.endswith((".yaml", ".yml")):
        raise SuiteError(f"config entry {entry!r}: expected a .yaml path", where=str(path))
    candidate = (experiments_dir / entry).resolve()
    if not candidate.is_file():
        raise SuiteError(f"config {entry!r} not found under {experiments_dir}", where=str(path))
    return candidate
