"""Readers for the real datasets: GLUE (train/val/test) here; SAMSum, DART, Spider in gen_datasets.py.

Sources, first match wins:
- a local directory: config key `data_dir`, else the env var (GLUE_LOCAL_DIR, SAMSUM_LOCAL_DIR,
  DART_LOCAL_DIR, SPIDER_LOCAL_DIR).  The environment beats the YAML (DESIGN.md).  Besides the
  formats below, a folder written by `DatasetDict.save_to_disk` (for GLUE: `<task>/`) is read.
- the hub ids the old scripts used (nyu-mll/glue <task>, Samsung/samsum, xlangai/spider, dart or
  GEM/dart), through `datasets` and its cache, offline flags honoured (hub_data.py).  Spider's
  SQLite databases are not on the hub: its questions may come from there, its `database/` folder
  must be local.

GLUE local layouts: the original GLUE distribution (`CoLA/train.tsv`, `CoLA/dev.tsv`, ...,
`MNLI/dev_matched.tsv` + `dev_mismatched.tsv`), or the hub's layout (`cola/train.jsonl`,
`cola/validation.jsonl`; `cola/train-*.parquet` when pyarrow is installed).

"glue-tvt": the official train split is divided 80/20 into train/validation with a fixed seed
(independent of the run seed), and the official validation split is the test split (for MNLI,
validation_matched is `test` and validation_mismatched gives `accuracy_mm`).

STS-B is posed as classification over six bucket words (zero..five = round(score)); the predicted
score is the expectation of the bucket index under the softmax of the six bucket logits, which
gives the continuous prediction that pearson/spearman need.
"""
from __future__ import annotations

import csv
import json
import os
import random
import sys
from pathlib import Path

from lat_core.config.hub_cache import LOCAL_DIR_VARS
from lat_core.config.job import TrainConfigError
from . import hub_data
from .data import Dataset

GLUE_TASKS = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte")
KNOWN = tuple(f"glue-tvt_{t}" for t in GLUE_TASKS) + ("samsum", "dart", "spider")
SPLIT_SEED = 42
ENV_VARS = LOCAL_DIR_VARS  # the one table (lat_core.config.hub_cache): the preflight reads it too
STSB_WORDS = ("zero", "one", "two", "three", "four", "five")
# task -> (label words by label id, text fields as on the hub, prompt field names)
GLUE = {
    "cola": (("unacceptable", "acceptable"), ("sentence",)),
    "sst2": (("negative", "positive"), ("sentence",)),
    "mrpc": (("no", "yes"), ("sentence1", "sentence2")),
    "qqp": (("no", "yes"), ("question1", "question2")),
    "stsb": (STSB_WORDS, ("sentence1", "sentence2")),
    "mnli": (("yes", "maybe", "no"), ("premise", "hypothesis")),
    "qnli": (("yes", "no"), ("question", "sentence")),
    "rte": (("yes", "no"), ("sentence1", "sentence2")),
}
# original GLUE distribution: folder, per-task TSV column -> hub field, header?
TSV = {
    "cola": ("CoLA", None),  # no header: source, label, original mark, sentence
    "sst2": ("SST-2", {"sentence": "sentence", "label": "label"}),
    "mrpc": ("MRPC", {"#1 String": "sentence1", "#2 String": "sentence2", "Quality": "label"}),
    "qqp": ("QQP", {"question1": "question1", "question2": "question2", "is_duplicate": "label"}),
    "stsb": ("STS-B", {"sentence1": "sentence1", "sentence2": "sentence2", "score": "label"}),
    "mnli": ("MNLI", {"sentence1": "premise", "sentence2": "hypothesis", "gold_label": "label"}),
    "qnli": ("QNLI", {"question": "question", "sentence": "sentence", "label": "label"}),
    "rte": ("RTE", {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"}),
}
TEXT_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2, "not_entailment": 1}


def is_known(name: str) -> bool:
    return name in KNOWN


def _local_dir(kind: str, data_dir: str, environ: dict) -> Path | None:
    var = ENV_VARS[kind]
    value = environ.get(var) or data_dir
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        src = f"${var}" if environ.get(var) else "data_dir"
        raise TrainConfigError(f"data: {src} points to {path}, which is not a directory")
    return path


def _need(path: Path, var: str) -> Path:
    """``path``, which must exist; a file is noted as read (the job record fingerprints it)."""
    if not path.exists():
        raise TrainConfigError(f"data: missing {path} (set {var} or data_dir to the dataset's folder)")
    if path.is_file():
        _files_read.append(path)
    return path


# Files the readers opened during one load(): the job record fingerprints them (record.py).
_files_read: list[Path] = []


def load(name: str, data_dir: str = "", environ: dict | None = None) -> Dataset:
    environ = dict(os.environ) if environ is None else environ
    _files_read.clear()
    hub_data.fingerprints.clear()
    if name.startswith("glue-tvt_"):
        ds = load_glue(name.split("_", 1)[1], data_dir, environ)
    else:
        from . import gen_datasets as G   # here, not at the top: gen_datasets imports this module's helpers
        ds = {"samsum": G.load_samsum, "dart": G.load_dart, "spider": G.load_spider}[name](data_dir, environ)
    ds.info["files"] = list(dict.fromkeys(str(p.resolve()) for p in _files_read))
    if hub_data.fingerprints:
        ds.info["hub_fingerprints"] = dict(hub_data.fingerprints)
    return ds


# ----------------------------------------------------------------------------- GLUE

def _glue_label(task: str, value) -> float | int:
    if task == "stsb":
        return float(value)
    if isinstance(value, str):
        value = value.strip()
        if value in TEXT_LABELS:
            return TEXT_LABELS[value]
        return int(value)
    return int(value)


def _read_tsv(task: str, path: Path) -> list[dict]:
    _files_read.append(path)
    rows = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        if TSV[task][1] is None:  # CoLA: no header
            for rec in reader:
                if len(rec) >= 4:
                    rows.append({"sentence": rec[3], "label": int(rec[1])})
            return rows
        header = next(reader, None)
        if header is None:
            return rows
        cols = {h: i for i, h in enumerate(header)}
        mapping = TSV[task][1]
        for col in mapping:
            if col not in cols:
                raise TrainConfigError(f"data: {path} lacks the column {col!r} (has {', '.join(header)})")
        for rec in reader:
            if len(rec) < len(header):
                continue
            row = {field: rec[cols[col]] for col, field in mapping.items()}
            if row["label"] in ("", "-"):
                continue
            rows.append(row)
    return rows


def _read_table(path: Path) -> list[dict]:
    _files_read.append(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _glue_local(task: str, root: Path) -> hub_data.Splits:
    """{"train": rows, "validation": rows, ...} in hub field names from a local copy."""
    folder = TSV[task][0]
    var = ENV_VARS["glue"]
    if hub_data.is_saved_dataset(root / task):
        return hub_data.from_disk(root / task, var)
    for base in (root / folder, root):
        if (base / "train.tsv").is_file():
            out = {"train": _read_tsv(task, base / "train.tsv")}
            if task == "mnli":
                out["validation_matched"] = _read_tsv(task, _need(base / "dev_matched.tsv", var))
                out["validation_mismatched"] = _read_tsv(task, _need(base / "dev_mismatched.tsv", var))
            else:
                out["validation"] = _read_tsv(task, _need(base / "dev.tsv", var))
            return out
    hub = root / task if (root / task).is_dir() else root
    exts = ["jsonl"] + (["parquet"] if _has_pyarrow() else [])
    splits = ("train", "validation_matched", "validation_mismatched") if task == "mnli" else ("train", "validation")
    out = {}
    for split in splits:
        found = [p for ext in exts for p in sorted(hub.glob(f"{split}*.{ext}"))
                 if p.name.startswith((f"{split}.", f"{split}-"))]
        if not found:
            raise TrainConfigError(
                f"data: no GLUE {task} {split} split under {root} (expected {folder}/train.tsv + "
                f"dev.tsv as in the GLUE distribution, or {task}/{split}.jsonl"
                f"{' / ' + task + '/' + split + '-*.parquet' if _has_pyarrow() else ''}); set {var}")
        out[split] = [r for p in found for r in _read_table(p)]
    return out


def _has_pyarrow() -> bool:
    try:
        import pyarrow.parquet  # noqa: F401
        return True
    except ImportError:
        return False


def _glue_row(task: str, raw: dict) -> dict:
    words, fields = GLUE[task]
    parts = [f"{f}: {str(raw[f]).strip()}" for f in fields]
    label = _glue_label(task, raw["label"])
    if task == "stsb":
        return {"text": " ".join(parts) + " label:", "label": int(round(label)), "score": label}
    if not 0 <= label < len(words):
        raise TrainConfigError(f"data: glue {task}: label {raw['label']!r} out of range")
    return {"text": " ".join(parts) + " label:", "label": label}


def load_glue(task: str, data_dir: str, environ: dict) -> Dataset:
    if task not in GLUE:
        raise TrainConfigError(f"data: unknown GLUE task {task!r} (known: {', '.join(GLUE)})")
    root = _local_dir("glue", data_dir, environ)
    raw = _glue_local(task, root) if root else hub_data.fetch("glue", task, ENV_VARS["glue"], environ)
    train = [_glue_row(task, r) for r in raw["train"]]
    random.Random(SPLIT_SEED).shuffle(train)
    cut = max(1, int(round(len(train) * 0.8)))
    ds = Dataset(f"glue-tvt_{task}", train[:cut], train[cut:] or train[-1:], GLUE[task][0],
                 kind="cls", task=task)
    if task == "mnli":
        ds.test = [_glue_row(task, r) for r in raw["validation_matched"]]
        ds.extra_tests = {"mm": [_glue_row(task, r) for r in raw["validation_mismatched"]]}
    else:
        ds.test = [_glue_row(task, r) for r in raw["validation"]]
    return ds


if __name__ == "__main__":  # quick look: python -m lat_core.train.datasets glue-tvt_rte
    d = load(sys.argv[1])
    print(d.name, d.kind, len(d.train), len(d.validation), len(d.test or []), d.train[:2])
