"""Dataset names a plan may use. The trainer owns loading; here we only check names early so a
typo fails at plan time, not after the countdown. A local directory path is accepted too."""

from __future__ import annotations

import re
from pathlib import Path

GLUE_TASKS = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte")
KNOWN_DATASETS = frozenset(
    [f"glue-tvt_{t}" for t in GLUE_TASKS] + ["samsum", "dart", "spider", "tiny-sst2", "tiny-cola"]
)
#: Names the old scripts' runbooks use for a dataset LAT knows under another name. The seeds' Spider
#: loader was called "spider-tvt" (train/validation/test, like glue-tvt_*): the same split LAT makes.
ALIASES = {"spider-tvt": "spider"}


def canonical(name: str) -> str:
    """``rte`` -> ``glue-tvt_rte``; ``glue-tvt_rte_200`` (a 200-example subset) -> ``glue-tvt_rte``;
    ``spider-tvt`` -> ``spider`` (ALIASES)."""
    base = re.sub(r"_\d+$", "", name)
    base = ALIASES.get(base, base)
    return f"glue-tvt_{base}" if base in GLUE_TASKS else base


def check_dataset(name: str, base: Path) -> str | None:
    """None when usable, else what is wrong (unknown name or missing directory)."""
    if canonical(name) in KNOWN_DATASETS:
        return None
    if "/" in name or name.startswith("."):
        path = (base / name).expanduser()
        if path.is_dir():
            return None
        return f"dataset directory {str(path)!r} does not exist"
    known = ", ".join(sorted(KNOWN_DATASETS))
    return f"unknown dataset {name!r} (known: {known}; or a directory path)"
