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


# Datasets of single short sentences (GLUE's SST-2 and CoLA, and their shipped samples): a batch is
# padded to its longest sentence, and their longest run to about 70 tokens in GPT-style BPE (SST-2's
# longest sentences have ~56 words), so no row of theirs comes near a 256-token max_seq_len. Bounded
# at SINGLE_SENTENCE_MAX_TOKENS with room to spare. Files put in such a dataset's place
# (GLUE_LOCAL_DIR) count as that dataset.
SINGLE_SENTENCE_DATA = frozenset({"glue-tvt_sst2", "glue-tvt_cola", "tiny-sst2", "tiny-cola"})
SINGLE_SENTENCE_MAX_TOKENS = 96


def single_sentence(data: object) -> bool:
    """Whether ``data`` (a job's ``data``) names one of SINGLE_SENTENCE_DATA."""
    return isinstance(data, str) and canonical(data) in SINGLE_SENTENCE_DATA


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
