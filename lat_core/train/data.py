"""Tasks as causal-LM data, plus a locally built tokenizer.

Why this shape: GLA and Mamba are language models, so every task is text.
Classification is posed as "<prompt> label: <word>" and trained/evaluated at
the label position only (one logit per label word).  Generation tasks
(SAMSum, DART, Spider) train on the target tokens after the prompt and are
evaluated with `.generate()`.  The tokenizer for tiny random models is built
with the `tokenizers` library from the dataset text (no hub access needed),
deterministically, so runs are reproducible and resumable.

Row formats after loading (see datasets.py for the real dataset readers):
- classification: {"text": prompt, "label": int} (+ "score": float for STS-B)
- generation: {"prompt": str, "target": str, "refs": [str, ...]} (+ task extras, e.g. "db_id")
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lat_core.config.datasets import ALIASES
from lat_core.config.job import TrainConfigError
from lat_core.config.kernel_shapes import bucket_widths  # noqa: F401 - the trainer's name for it
from lat_core.config.user_data import DataSpec

DATA_ROOT = Path(__file__).resolve().parent.parent / "data"
# dataset name -> (folder under lat_core/data, label words for label 0 and 1, task: its metrics)
SHIPPED = {
    "tiny-sst2": ("tiny_sst2", ("negative", "positive"), "sst2"),
    "tiny-cola": ("tiny_cola", ("unacceptable", "acceptable"), "cola"),  # cola: MCC, as GLUE's CoLA
}
SPLITS = ("train", "validation")
EOS, UNK = "<eos>", "<unk>"
SUBSET_RE = re.compile(r"^(?P<base>.+?)_(?P<n>\d+)$")


@dataclass
class Dataset:
    """Examples of every split; `kind` is "cls" or "gen"; `task` picks the metrics."""
    name: str
    train: list[dict]
    validation: list[dict]
    label_words: tuple = ()
    kind: str = "cls"
    task: str = "accuracy"
    test: list[dict] | None = None
    extra_tests: dict = field(default_factory=dict)   # e.g. {"mm": [...]} for MNLI mismatched
    info: dict = field(default_factory=dict)          # e.g. {"db_root": ...} for Spider
    metric: str | None = None   # the main metric a user's data names (own_data); None: the task's (results.metrics)


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
        rows.append({"text": prompt_text(row["sentence"]), "label": row["label"]})
    if not rows:
        raise TrainConfigError(f"data: {path} holds no examples")
    return rows


def _subset(ds: Dataset, n: int) -> Dataset:
    """`_N` suffix: keep the first N examples of every split (splits are already shuffled/fixed)."""
    ds.train = ds.train[:n]
    ds.validation = ds.validation[:n]
    if ds.test is not None:
        ds.test = ds.test[:n]
    ds.extra_tests = {k: v[:n] for k, v in ds.extra_tests.items()}
    return ds


def load_dataset(name: str | DataSpec, data_dir: str = "", environ: dict | None = None) -> Dataset:
    """Resolve a dataset name: shipped tiny sets, GLUE/SAMSum/DART/Spider, or a directory; or a
    user's dataset named by its columns (a DataSpec: own_data.py).

    A directory holds train.jsonl/validation.jsonl ({"sentence", "label"}) and may hold
    labels.json (["word for 0", "word for 1"]); default negative/positive.
    A `_N` suffix (glue-tvt_rte_200) keeps N examples per split.
    """
    from . import datasets as R

    if isinstance(name, DataSpec):
        from . import own_data
        return own_data.load(name, dict(os.environ) if environ is None else environ)
    m = SUBSET_RE.match(name)
    if m and not Path(name).expanduser().is_dir():
        return _subset(load_dataset(m.group("base"), data_dir, environ), int(m.group("n")))
    name = ALIASES.get(name, name)
    if name in R.GLUE_TASKS:
        name = f"glue-tvt_{name}"
    if R.is_known(name):
        return R.load(name, data_dir, environ)
    task = "accuracy"
    if name in SHIPPED:
        folder, words, task = SHIPPED[name]
        root = DATA_ROOT / folder
    else:
        root = Path(name).expanduser()
        if not root.is_dir():
            raise TrainConfigError(f"data: unknown dataset {name!r} (known: {', '.join(SHIPPED)}, "
                                   f"{', '.join(R.KNOWN)}, or a directory holding train.jsonl "
                                   "and validation.jsonl)")
        words = ("negative", "positive")
        if (root / "labels.json").is_file():
            words = tuple(json.loads((root / "labels.json").read_text()))
    for split in SPLITS:
        if not (root / f"{split}.jsonl").is_file():
            raise TrainConfigError(f"data: {root} has no {split}.jsonl")
    files = [root / f"{split}.jsonl" for split in SPLITS] + [p for p in [root / "labels.json"] if p.is_file()]
    return Dataset(name, _read_jsonl(root / "train.jsonl"),
                   _read_jsonl(root / "validation.jsonl"), tuple(words), task=task,
                   info={"files": [str(p.resolve()) for p in files]})


def prompt_text(sentence: str) -> str:
    """The text before the label word."""
    return f"sentence: {sentence} label:"


def all_rows(ds: Dataset) -> list[dict]:
    rows = ds.train + ds.validation + (ds.test or [])
    for extra in ds.extra_tests.values():
        rows = rows + extra
    return rows


def build_tokenizer(ds: Dataset):
    """A WordLevel tokenizer over every word in the data, sorted so ids are stable.

    Returns a transformers PreTrainedTokenizerFast with eos = pad and left padding.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    split = pre_tokenizers.Whitespace().pre_tokenize_str
    words = set(ds.label_words)
    texts = [prompt_text("")]
    for row in all_rows(ds):
        texts.extend([row.get("text", ""), row.get("prompt", ""), row.get("target", "")])
        texts.extend(row.get("refs", []))
    for text in texts:
        words.update(w for w, _ in split(text))
    vocab = {EOS: 0, UNK: 1}
    for w in sorted(words):
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, unk_token=UNK, pad_token=EOS)
    fast.padding_side = "left"
    return fast


def label_token_ids(tokenizer, words) -> list[int]:
    """Token id of each label word as it follows "label:" (first sub-token for BPE vocabularies)."""
    ids = []
    for w in words:
        enc = tokenizer(" " + w, add_special_tokens=False)["input_ids"]
        if not enc:
            raise TrainConfigError(f"data: label word {w!r} encodes to nothing")
        ids.append(enc[0])
    if len(set(ids)) != len(ids):
        raise TrainConfigError(f"data: label words {tuple(words)} share their first token")
    return ids


def encode(rows: list[dict], tokenizer, label_ids: list[int], max_seq_len: int) -> list[dict]:
    """Classification: prompt ids + label id, keeping the end (label side) when too long."""
    out = []
    for row in rows:
        ids = tokenizer(row["text"], add_special_tokens=False)["input_ids"]
        ids = ids[-(max_seq_len - 1):] + [label_ids[row["label"]]]
        out.append({"input_ids": ids, "label": row["label"], "score": row.get("score")})
    return out


def encode_gen(rows: list[dict], tokenizer, max_seq_len: int, max_target_len: int) -> list[dict]:
    """Generation: prompt ids (left-truncated) and target ids + eos (right-truncated)."""
    out = []
    for row in rows:
        tgt = tokenizer(" " + row["target"], add_special_tokens=False)["input_ids"][:max_target_len]
        tgt = tgt + [tokenizer.eos_token_id]
        room = max(1, max_seq_len - len(tgt))
        prompt = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"][-room:]
        out.append({"input_ids": prompt + tgt, "prompt_ids": prompt, "n_target": len(tgt), "row": row})
    return out


def collate(examples: list[dict], pad_id: int, width: int | None = None) -> dict:
    """Left-pad to the longest example (the label token is the last position).

    Generation examples also get `target_mask` (1 on target tokens); classification ones `labels`.
    """
    width = width or max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    tmask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[i, width - n:] = torch.tensor(e["input_ids"])
        mask[i, width - n:] = 1
        if "n_target" in e:
            tmask[i, width - e["n_target"]:] = 1
    out = {"input_ids": ids, "attention_mask": mask}
    if "label" in examples[0]:
        out["labels"] = torch.tensor([e["label"] for e in examples])
    else:
        out["target_mask"] = tmask
    return out


def train_batches(n_examples: int, batch_size: int, seed: int, start_step: int, max_steps: int):
    """Batch index lists for steps start_step+1 .. max_steps.

    `batch_size` is the effective batch (micro-batch x grad_accum), so the
    examples a step sees do not depend on how it is split into micro-batches.
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


# ---------------------------------------------------------------------------------------------
# Training DataLoader.  Why a batch sampler over train_batches: the order of examples is decided
# in the main process by the same seeded permutation as before, and DataLoader returns batches in
# sampler order whatever the number of workers, so workers only parallelise collation and
# results do not depend on num_workers (nor on where a run was resumed).  The HF Trainer
# accumulates gradients over `gradient_accumulation_steps` consecutive loader items, so the
# loader yields micro-batches, exactly grad_accum of them per optimisation step.

class ExampleSet(torch.utils.data.Dataset):
    """Map-style view of the encoded training examples."""

    def __init__(self, examples: list[dict]):
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict:
        return self.examples[i]


def check_fills_grad_accum(n_examples: int, grad_accum: int) -> None:
    """Every micro-batch of a step needs at least one example."""
    if n_examples < grad_accum:
        raise TrainConfigError(f"train: {n_examples} training examples cannot fill grad_accum {grad_accum} "
                               "micro-batches; lower train.grad_accum (HP_GRAD_ACCUM)")


def split_micro(idx: list[int], size: int, grad_accum: int) -> list[list[int]]:
    """An effective batch as grad_accum micro-batches: `size` examples each, or, for a batch cut
    short by a training set smaller than the effective batch, near-equal non-empty parts (the step
    loss is normalised over the whole step, so only the split changes, not the gradient)."""
    if len(idx) == size * grad_accum:
        return [idx[i:i + size] for i in range(0, len(idx), size)]
    check_fills_grad_accum(len(idx), grad_accum)
    k, r = divmod(len(idx), grad_accum)
    bounds = [i * k + min(i, r) for i in range(grad_accum + 1)]
    return [idx[a:b] for a, b in zip(bounds, bounds[1:])]


class MicroBatchSampler(torch.utils.data.Sampler):
    """grad_accum micro-batches of indices per optimisation step start_step+1 .. max_steps."""

    def __init__(self, n_examples: int, micro_batch_size: int, grad_accum: int, seed: int,
                 start_step: int, max_steps: int):
        self.args = (n_examples, micro_batch_size, grad_accum, seed, start_step, max_steps)

    def __iter__(self):
        n, size, accum, seed, start, stop = self.args
        for idx in train_batches(n, size * accum, seed, start, stop):
            yield from split_micro(idx, size, accum)

    def __len__(self) -> int:
        return max(0, self.args[5] - self.args[4]) * self.args[2]


def bucket_width(widths: list[int], longest: int) -> int:
    """The smallest of ``widths`` that holds ``longest`` tokens (``longest`` itself past the last)."""
    return next((w for w in widths if w >= longest), longest)


def scored_targets(batch: dict, keep: int) -> torch.Tensor:
    """[rows, keep - 1]: the token each of the last keep - 1 positions' predecessors must predict
    (the logits of positions width-keep .. width-2), -100 where nothing is scored.  Classification
    scores the label token (the last one), generation its target tokens: the same tokens and
    positions batch_loss scores, laid out so that the loss has one static shape."""
    ids = batch["input_ids"][:, -(keep - 1):]
    if "labels" in batch:
        scored = torch.zeros_like(ids, dtype=torch.bool)
        scored[:, -1] = batch["attention_mask"][:, -1].bool()
    else:
        scored = batch["target_mask"][:, -(keep - 1):].bool()
    return ids.masked_fill(~scored, -100)


def static_batch(examples: list[dict], pad_id: int, rows: int, width: int, keep: int) -> dict:
    """A micro-batch of fixed shape for a captured graph: `rows` rows (a short batch gets all-pad
    rows that score nothing) of `width` tokens, left-padded, with its scored targets."""
    batch = collate(examples, pad_id, width)
    extra = rows - len(examples)
    if extra > 0:
        for key, fill in (("input_ids", pad_id), ("attention_mask", 0), ("target_mask", 0)):
            if key in batch:
                batch[key] = torch.cat([batch[key], torch.full((extra, width), fill, dtype=torch.long)])
        if "labels" in batch:
            batch["labels"] = torch.cat([batch["labels"], torch.zeros(extra, dtype=torch.long)])
    targets = scored_targets(batch, keep)
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "targets": targets,
            "n_scored": int((targets != -100).sum())}


def packed_batch(examples: list[dict]) -> dict:
    """A micro-batch as one row without padding: the examples back to back, `cu_seqlens` marking
    where each starts (fla's varlen path resets the recurrent state there), `keep` the positions
    whose logits the loss needs and `targets` the tokens they predict: the label token for
    classification, the target tokens for generation (a target token that is an example's first
    token has no position before it and is not scored).

    `cu_seqlens` is int32, as fla's own unpadding makes it (``prepare_cu_seqlens_from_mask``): Triton's
    autotuner keys a kernel by its tensor arguments' dtypes too, so int64 bounds gave every varlen
    kernel keys that neither the kernel warm-up nor the shipped table holds, and each packed job
    autotuned them itself (8 at once on an H100: no step in 300 s, then out of memory while
    autotuning; bench/RESULTS.md, 2026-11-27)."""
    ids, keep, targets, bounds = [], [], [], [0]
    for e in examples:
        start, seq = bounds[-1], e["input_ids"]
        n_scored = 1 if "label" in e else min(e["n_target"], len(seq) - 1)
        first = len(seq) - n_scored
        keep.extend(start + j - 1 for j in range(first, len(seq)))
        targets.extend(seq[first:])
        ids.extend(seq)
        bounds.append(start + len(seq))
    return {"input_ids": torch.tensor([ids]), "cu_seqlens": torch.tensor(bounds, dtype=torch.int32),
            "keep": torch.tensor(keep, dtype=torch.long), "targets": torch.tensor([targets]),
            "n_scored": len(targets)}


@dataclass(frozen=True)
class Layout:
    """How the training collate lays out a micro-batch: ``padded`` (left-padded to its longest
    example, the eager default), ``static`` (fixed rows, width from bucket_widths, for graphs; `keep`
    logits positions: 2 for classification, room for the longest target for generation) or
    ``packed`` (one row, no padding, fla's varlen path)."""
    kind: str = "padded"
    rows: int = 0
    widths: tuple = ()
    keep_gen: int = 0

    def keep(self, width: int, classification: bool) -> int:
        return 2 if classification else min(width, self.keep_gen)


class TrainCollate:
    """Examples -> one collated micro-batch, plus host-side counts (plain ints): `n_tokens`
    (non-padding tokens, for tokens/s), `n_scored` (tokens the loss scores, to normalise the step
    loss) and `n_need` (positions the loss needs).  Counting here, on the CPU in the loader, keeps
    the training step free of device-to-host syncs.  Picklable for workers."""

    def __init__(self, pad_id: int, layout: Layout | None = None):
        self.pad_id = pad_id
        self.layout = layout or Layout()

    def __call__(self, examples: list[dict]) -> dict:
        n_tokens = sum(len(e["input_ids"]) for e in examples)
        kind = self.layout.kind
        if kind == "packed":
            return {**packed_batch(examples), "n_tokens": n_tokens}
        if kind == "static":
            longest = max(len(e["input_ids"]) for e in examples)
            width = bucket_width(self.layout.widths, longest)
            keep = self.layout.keep(width, "label" in examples[0])
            rows = max(self.layout.rows, len(examples))
            return {**static_batch(examples, self.pad_id, rows, width, keep), "n_tokens": n_tokens}
        batch = collate(examples, self.pad_id)
        width = batch["input_ids"].shape[1]
        batch["n_tokens"] = n_tokens
        if "label" in examples[0]:
            batch["n_scored"] = len(examples)
        else:  # target tokens after position 0 (position 0 is never predicted)
            batch["n_scored"] = sum(min(e["n_target"], width - 1) for e in examples)
            batch["n_need"] = max(e["n_target"] for e in examples) + 1
        return batch


LOADER_FIELDS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")
LARGE_CHOICE = {"num_workers": 2, "pin_memory": False, "persistent_workers": False, "prefetch_factor": 2}


def dataloader_settings(cfg, n_train: int, cuda: bool) -> tuple[dict, str]:
    """The loader settings and one log line saying where they came from.

    Returns ({field: value, ..., "source": {field: user|auto|default}, "large_dataset": bool,
    "threshold": int}, line).  User settings (job YAML or env) always win; for a training set of
    at least train.large_dataset_threshold examples, unset fields get memory-frugal values
    (num_workers at most 2, no persistent workers, prefetch 2, no pinned memory).
    """
    t = cfg.train
    threshold = t.large_dataset_threshold
    large = threshold > 0 and n_train >= threshold
    user = {f: getattr(t, f) for f in LOADER_FIELDS if f"train.{f}" in cfg.explicit and getattr(t, f) is not None}
    default_workers = t.num_workers
    defaults = {"num_workers": default_workers, "pin_memory": cuda, "persistent_workers": False,
                "prefetch_factor": 2}
    out, source = {}, {}
    for f in LOADER_FIELDS:
        if f in user:
            out[f], source[f] = user[f], "user"
        elif large:
            value = LARGE_CHOICE[f]
            out[f], source[f] = (min(default_workers, value) if f == "num_workers" else value), "auto"
        else:
            out[f], source[f] = defaults[f], "default"
    notes = []
    if out["num_workers"] == 0:
        if out["persistent_workers"] and source["persistent_workers"] == "user":
            notes.append("persistent_workers needs workers; off with num_workers 0")
        out["persistent_workers"] = False
        out["prefetch_factor"] = None
    if out["pin_memory"] and not cuda:
        notes.append("pin_memory has no effect without CUDA; off")
        out["pin_memory"] = False
    desc = ", ".join(f"{f}={out[f]} ({source[f]})" for f in LOADER_FIELDS)
    if large:
        auto = [f for f in LOADER_FIELDS if source[f] == "auto"]
        why = (f"large training set ({n_train:,} >= train.large_dataset_threshold {threshold:,}): "
               + (f"memory-frugal {', '.join(auto)} chosen; " if auto else "all settings given by the user; "))
    else:
        why = f"training set of {n_train:,} examples (< {threshold:,}): "
    line = f"dataloader: {why}{desc}" + (f" [{'; '.join(notes)}]" if notes else "")
    return {**out, "source": source, "large_dataset": large, "threshold": threshold}, line


def train_loader(examples: list[dict], settings: dict, micro_batch_size: int, grad_accum: int,
                 seed: int, start_step: int, max_steps: int, pad_id: int, layout: Layout | None = None):
    """The DataLoader yielding collated micro-batches, grad_accum per step, in the seeded order."""
    kwargs = {"num_workers": settings["num_workers"], "pin_memory": settings["pin_memory"]}
    if settings["num_workers"] > 0:
        kwargs["persistent_workers"] = settings["persistent_workers"]
        kwargs["prefetch_factor"] = settings["prefetch_factor"]
    sampler = MicroBatchSampler(len(examples), micro_batch_size, grad_accum, seed, start_step, max_steps)
    # a private generator: creating the iterator draws a worker base seed, which must not
    # consume the global RNG (dropout) stream, or a resumed run would diverge
    gen = torch.Generator().manual_seed(seed * 100_003 + start_step)
    return torch.utils.data.DataLoader(ExampleSet(examples), batch_sampler=sampler, generator=gen,
                                       collate_fn=TrainCollate(pad_id, layout), **kwargs)
