"""Where the shipped configs live: ``$LAT_CONFIGS``, else the repository's ``configs/``."""

from __future__ import annotations

import os
from pathlib import Path

_REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def configs_root(override: str | os.PathLike | None = None) -> Path:
    if override:
        return Path(override).expanduser().resolve()
    env = os.environ.get("LAT_CONFIGS")
    if env:
        return Path(env).expanduser().resolve()
    return _REPO_CONFIGS
