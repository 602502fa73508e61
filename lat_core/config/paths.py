"""Where config trees live: the one LAT ships, and a user's own beside it.

A config tree holds any of ``suites/``, ``experiments/``, ``peft/``, ``plans/`` and ``pretrain/``.
The shipped tree is package data of lat_core: ``lat_core/configs/`` in an installed wheel (mapped
from the checkout's ``configs/`` by pyproject.toml), the checkout's ``configs/`` in a source tree or
an editable install. A user's tree (``--configs DIR`` or ``$LAT_CONFIGS``) is searched first, so its
names shadow shipped ones, and everything it does not define still comes from the shipped tree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lat_core.errors import ConfigError

USER = "user"
SHIPPED = "shipped"
ENV_VAR = "LAT_CONFIGS"
_CHECKOUT_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@dataclass(frozen=True)
class ConfigTree:
    path: Path
    origin: str  # USER or SHIPPED: what `lat-tui suites` shows as where a name comes from

    def find(self, kind: str, relative: str) -> Path | None:
        """``<tree>/<kind>/<relative>`` if that file exists."""
        candidate = (self.path / kind / relative).resolve()
        return candidate if candidate.is_file() else None


def shipped_configs() -> Path:
    """The shipped tree: the wheel's package data if installed from one, else the checkout's."""
    packaged = Path(str(resources.files("lat_core").joinpath("configs")))
    return packaged if packaged.is_dir() else _CHECKOUT_CONFIGS


def user_configs(override: str | os.PathLike[str] | None = None) -> Path | None:
    """The user's tree from ``--configs`` (override) or ``$LAT_CONFIGS``; None when neither is set."""
    source, raw = ("--configs", override) if override else (ENV_VAR, os.environ.get(ENV_VAR))
    if not raw:
        return None
    path = Path(raw).expanduser().resolve()
    if not path.is_dir():
        raise ConfigError(f"configs directory {path} does not exist", where=source)
    return path


def config_trees(override: str | os.PathLike[str] | None = None) -> tuple[ConfigTree, ...]:
    """The trees to search, in order: the user's (if any), then the shipped one."""
    shipped = ConfigTree(shipped_configs(), SHIPPED)
    user = user_configs(override)
    if user is None or user == shipped.path:
        return (shipped,)
    return (ConfigTree(user, USER), shipped)


def find_in_trees(trees: Iterable[ConfigTree], kind: str, relative: str) -> Path | None:
    """The first tree's ``<kind>/<relative>``; None when no tree has it."""
    for tree in trees:
        found = tree.find(kind, relative)
        if found is not None:
            return found
    return None


def find_plan(arg: str, trees: Iterable[ConfigTree]) -> Path:
    """``--plan`` as given when it is a file or looks like a path; a bare name (``demo``) is
    ``plans/<name>.yaml`` of the config trees, so an installed LAT runs its shipped plans."""
    given = Path(arg).expanduser()
    if given.is_file() or given.suffix in (".yaml", ".yml") or len(given.parts) > 1:
        return given
    return find_in_trees(trees, "plans", f"{arg}.yaml") or given
