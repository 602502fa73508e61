"""Synthetic GLUE files (the published TSV layout) whose examples fill the whole sequence.

The throughput benchmark needs every example to be at least ``max_seq_len`` tokens long, so each
optimizer step trains a known number of tokens (batch x accumulation x max_seq_len) and the
tokens/s of the two sides compare like for like. Words come from a fixed synthetic vocabulary, so
the trainer's word-level tokenizer (built from the data) covers them.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable


def write_sst2(root: Path, *, n_train: int = 400, n_dev: int = 32, words: int = 300, vocab: int = 4000,
               seed: int = 0) -> Path:
    """Write ``root/SST-2/{train,dev}.tsv`` and return ``root`` (what GLUE_LOCAL_DIR points at)."""
    return _write_splits(root / "SST-2", "sentence\tlabel", lambda i, text, rng: f"{text(words)}\t{rng.randint(0, 1)}",
                         n_train=n_train, n_dev=n_dev, vocab=vocab, seed=seed)


#: The dataset the suite bench's long rows stand in for (``--data long``). A sentence-pair task, so the engine
#: judges its rows by ``max_seq_len``. SST-2's name made admission and ``fuse: auto`` take 256-token rows for
#: single sentences: a Mamba job's memory prior was then 15.8 GiB for 40 GiB of use, and all 8 eager jobs
#: were admitted at once and ran out of an H200's memory (bench/RESULTS.md, 2026-11-26, twelfth session).
LONG_ROWS_DATA = "glue-tvt_rte"


def write_rte(root: Path, *, n_train: int = 400, n_dev: int = 32, words: int = 300, vocab: int = 4000,
              seed: int = 0) -> Path:
    """Write ``root/RTE/{train,dev}.tsv`` (a premise of ``words`` words, a 3-word hypothesis) and return
    ``root`` (what GLUE_LOCAL_DIR points at)."""
    def row(i: int, text: Callable[[int], str], rng: random.Random) -> str:
        premise, hypothesis = text(words), text(3)
        return f"{i}\t{premise}\t{hypothesis}\t{rng.choice(('entailment', 'not_entailment'))}"
    return _write_splits(root / "RTE", "index\tsentence1\tsentence2\tlabel", row,
                         n_train=n_train, n_dev=n_dev, vocab=vocab, seed=seed)


def _write_splits(folder: Path, header: str, row: Callable[[int, Callable[[int], str], random.Random], str], *,
                  n_train: int, n_dev: int, vocab: int, seed: int) -> Path:
    """``folder``'s train.tsv and dev.tsv: ``header``, then ``row(i, text, rng)`` per example, where ``text(k)``
    is k words of a fixed synthetic vocabulary; returns ``folder``'s parent (what GLUE_LOCAL_DIR points at)."""
    rng = random.Random(seed)
    lexicon = [f"w{i}" for i in range(vocab)]

    def text(k: int) -> str:
        return " ".join(rng.choices(lexicon, k=k))

    folder.mkdir(parents=True, exist_ok=True)
    for name, count in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        lines = [header] + [row(i, text, rng) for i in range(count)]
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder.parent
