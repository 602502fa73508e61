"""Tiny classification data as a causal-LM task, plus a locally built tokenizer.

Why this shape: GLA and Mamba are language models, so classification is posed
as "sentence: <text> label: <word>" and trained/evaluated at the label position
only.  The tokenizer is built with the `tokenizers` library from the dataset
text (no hub access needed), deterministically, so runs are reproducible and
resumable.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import TrainConfigError

DATA_ROOT = Path(__file__).resolve().parent.parent / "data"
# dataset name -> (folder under lat_core/data, label words for label 0 and 1)
SHIPPED = {
    "tiny-sst2": ("tiny_sst2", ("negative", "positive")),
    "tiny-cola": ("tiny_cola", ("unacceptable", "acceptable")),
}
SPLITS = ("train", "validation")
EOS, UNK = "<eos>", "<unk>"


@dataclass
class Dataset:
    """Raw examples of both splits and the two label words."""
    name: str
    train: list[dict]
    validation: list[dict]
    label_words: tuple[str, str]


def _read_jsonl(path: Path) -> list[dict]:
    """Read examples {"sentence": str, "label": 0|1}, naming the file and line on errors."""
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row["sentence"], str) or row["label"] not in (0, 1):
                raise ValueError("need a string 'sentence' and 'label' 0 or 1")
        except (ValueError, KeyError, TypeError) as exc:
            raise TrainConfigError(f"data: {path}:{i}: bad example ({exc})") from exc
        rows.append(row)
    if not rows:
        raise TrainConfigError(f"data: {path} holds no examples")
    return rows


def load_dataset(name: str) -> Dataset:
    """Resolve a shipped dataset name or a directory with train.jsonl/validation.jsonl.

    A directory may hold labels.json (["word for 0", "word for 1"]); default
    negative/positive.
    """
    if name in SHIPPED:
        folder, words = SHIPPED[name]
        root = DATA_ROOT / folder
    else:
        root = Path(name).expanduser()
        if not root.is_dir():
            raise TrainConfigError(f"data: unknown dataset {name!r} (known: {', '.join(SHIPPED)}, "
                                   "or a directory holding train.jsonl and validation.jsonl)")
        words = ("negative", "positive")
        if (root / "labels.json").is_file():
            words = tuple(json.loads((root / "labels.json").read_text()))
    for split in SPLITS:
        if not (root / f"{split}.jsonl").is_file():
            raise TrainConfigError(f"data: {root} has no {split}.jsonl")
    return Dataset(name, _read_jsonl(root / "train.jsonl"),
                   _read_jsonl(root / "validation.jsonl"), tuple(words))


def prompt_text(sentence: str) -> str:
    """The text before the label word."""
    return f"sentence: {sentence} label:"


def build_tokenizer(ds: Dataset):
    """A WordLevel tokenizer over every word in the data, sorted so ids are stable.

    Returns a transformers PreTrainedTokenizerFast with eos = pad and left padding.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    split = pre_tokenizers.Whitespace().pre_tokenize_str
    words = set(ds.label_words)
    for text in [prompt_text("")] + [row["sentence"] for row in ds.train + ds.validation]:
        words.update(w for w, _ in split(text))
    vocab = {EOS: 0, UNK: 1}
    for w in sorted(words):
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, unk_token=UNK, pad_token=EOS)
    fast.padding_side = "left"
    return fast


def label_token_ids(tokenizer, words: tuple[str, str]) -> list[int]:
    """Token id of each label word as it follows "label:" (first sub-token for BPE vocabularies)."""
    ids = []
    for w in words:
        enc = tokenizer(" " + w, add_special_tokens=False)["input_ids"]
        if not enc:
            raise TrainConfigError(f"data: label word {w!r} encodes to nothing")
        ids.append(enc[0])
    if ids[0] == ids[1]:
        raise TrainConfigError(f"data: label words {words} share their first token")
    return ids


def encode(rows: list[dict], tokenizer, label_ids: list[int], max_seq_len: int) -> list[dict]:
    """Prompt ids + label id, keeping the end (label side) when too long."""
    out = []
    for row in rows:
        ids = tokenizer(prompt_text(row["sentence"]), add_special_tokens=False)["input_ids"]
        ids = ids[-(max_seq_len - 1):] + [label_ids[row["label"]]]
        out.append({"input_ids": ids, "label": row["label"]})
    return out


def collate(examples: list[dict], pad_id: int) -> dict:
    """Left-pad to the longest example; the label token is always the last position."""
    width = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[i, width - n:] = torch.tensor(e["input_ids"])
        mask[i, width - n:] = 1
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.tensor([e["label"] for e in examples])}


def train_batches(n_examples: int, batch_size: int, seed: int, start_step: int, max_steps: int):
    """Batch index lists for steps start_step+1 .. max_steps.

    Each epoch is a seeded permutation, so the batch of step s does not depend
    on where a run was resumed.
    """
    per_epoch = max(1, n_examples // batch_size)
    epoch_cache: dict[int, list[int]] = {}
    for step in range(start_step, max_steps):
        epoch, pos = divmod(step, per_epoch)
        if epoch not in epoch_cache:
            gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
            epoch_cache = {epoch: torch.randperm(n_examples, generator=gen).tolist()}
        perm = epoch_cache[epoch]
        batch = perm[pos * batch_size:(pos + 1) * batch_size]
        yield batch if batch else perm[:batch_size]
