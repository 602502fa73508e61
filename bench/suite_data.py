"""Synthetic GLUE files (the published TSV layout) whose examples fill the whole sequence.

The throughput benchmark needs every example to be at least ``max_seq_len`` tokens long, so each
optimizer step trains a known number of tokens (batch x accumulation x max_seq_len) and the
tokens/s of the two sides compare like for like. Words come from a fixed synthetic vocabulary, so
the trainer's word-level tokenizer (built from the data) covers them.
"""

from __future__ import annotations

import random
from pathlib import Path


def write_sst2(root: Path, *, n_train: int = 400, n_dev: int = 32, words: int = 300, vocab: int = 4000,
               seed: int = 0) -> Path:
    """Write ``root/SST-2/{train,dev}.tsv`` and return ``root`` (what GLUE_LOCAL_DIR points at)."""
    rng = random.Random(seed)
    lexicon = [f"w{i}" for i in range(vocab)]
    folder = root / "SST-2"
    folder.mkdir(parents=True, exist_ok=True)
    for name, count in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        lines = ["sentence\tlabel"]
        for _ in range(count):
            lines.append(" ".join(rng.choices(lexicon, k=words)) + f"\t{rng.randint(0, 1)}")
        (folder / name).write_text("\n".join(lines) + "\n")
    return root


#: The dataset the suite bench's long rows stand in for (``--data long``). A sentence-pair task, so the engine
#: judges its rows by ``max_seq_len``. SST-2's name made admission and ``fuse: auto`` take 256-token rows for
#: single sentences: a Mamba job's memory prior was then 15.8 GiB for 40 GiB of use, and all 8 eager jobs
#: were admitted at once and ran out of an H200's memory (bench/RESULTS.md, 2026-11-26, twelfth session).
LONG_ROWS_DATA = "glue-tvt_rte"


def write_rte(root: Path, *, n_train: int = 400, n_dev: int = 32, words: int = 300, vocab: int = 4000,
              seed: int = 0) -> Path:
    """Write ``root/RTE/{train,dev}.tsv`` (a premise of ``words`` words, a 3-word hypothesis) and return
    ``root`` (what GLUE_LOCAL_DIR points at)."""
    rng = random.Random(seed)
    lexicon = [f"w{i}" for i in range(vocab)]
    folder = root / "RTE"
    folder.mkdir(parents=True, exist_ok=True)
    for name, count in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        lines = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(count):
            premise, hypothesis = " ".join(rng.choices(lexicon, k=words)), " ".join(rng.choices(lexicon, k=3))
            lines.append(f"{i}\t{premise}\t{hypothesis}\t{rng.choice(('entailment', 'not_entailment'))}")
        (folder / name).write_text("\n".join(lines) + "\n")
    return root
