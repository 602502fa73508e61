"""Synthetic GLUE SST-2 files (the published TSV layout) whose sentences fill the whole sequence.

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
