"""A user's own dataset (``data:`` as a mapping, lat_core.config.user_data.DataSpec) as the rows the
trainer trains on: classification rows {"text", "label"} and generation rows {"prompt", "target",
"refs"}, the same shapes the shipped readers give (data.py), so everything downstream is shared.

Why the task is posed from the column names: a row ``{sentence1: a, sentence2: b, label: 1}`` with
``text: [sentence1, sentence2]`` becomes "sentence1: a sentence2: b label:" and the label word, as
GLUE's rows do (datasets._glue_row); a generation row becomes "<col>: <value> ... <target column>:"
then the target, as SAMSum's does ("summarize: ... summary:").
"""
from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterable, Mapping
from pathlib import Path

from lat_core.config.job import TrainConfigError
from lat_core.config.user_data import SPLITS, VALIDATION_NAMES, DataSpec, DataSpecError, local_files
from . import hub_data
from .data import Dataset

SPLIT_SEED = 42          # as glue-tvt: the held-out validation rows do not depend on the run's seed
HELD_OUT = 0.2           # a source without a validation split gives this share of its training rows
LOCAL_HINT = "data.path (a local file or folder)"
UNLABELLED = (None, "", -1, "-1")   # GLUE's test splits on the hub carry -1


def load(spec: DataSpec, environ: Mapping[str, str]) -> Dataset:
    """The Dataset of ``spec``; TrainConfigError naming the key, file or split at fault."""
    hub_data.fingerprints.clear()
    splits, files = raw_splits(spec, environ)
    info: dict = {"files": [str(p) for p in files], "source": spec.path}
    if hub_data.fingerprints:   # the job record keeps what the hub served (record.data_fingerprint)
        info["hub_fingerprints"] = dict(hub_data.fingerprints)
    if "validation" not in splits:
        splits["train"], splits["validation"] = _held_out(splits["train"])
        info["validation"] = f"{HELD_OUT:.0%} of the training rows (seed {SPLIT_SEED})"
    for split, rows in splits.items():
        _check_columns(spec, split, rows)
    build = _cls_splits if spec.kind == "cls" else _gen_splits
    rows_of, words = build(spec, splits)
    ds = Dataset(spec.display_name, rows_of["train"], rows_of["validation"], words, kind=spec.kind, task="own",
                 test=rows_of.get("test"), info=info, metric=spec.main_metric)
    if not ds.train or not ds.validation:
        empty = "train" if not ds.train else "validation"
        raise TrainConfigError(f"data: {spec.path} gives no {empty} examples", field="data.path")
    return ds


# ----------------------------------------------------------------------------- sources

def raw_splits(spec: DataSpec, environ: Mapping[str, str]) -> tuple[dict[str, list[dict]], list[Path]]:
    """({LAT split: rows}, local files read) from a file, a folder, a saved DatasetDict or the hub."""
    path = Path(spec.path)
    try:
        files = local_files(spec)
    except DataSpecError as exc:
        raise TrainConfigError(str(exc), field=exc.field) from None
    if files is not None:
        return {split: read_file(file) for split, file in files.items()}, list(files.values())
    if path.is_absolute() and hub_data.is_saved_dataset(path):
        return _named_splits(spec, hub_data.from_disk(path, LOCAL_HINT), str(path)), []
    named = hub_data.fetch_id(spec.path, spec.config, LOCAL_HINT, environ)
    return _named_splits(spec, named, f"{spec.path}{' ' + spec.config if spec.config else ''}"), []


def _named_splits(spec: DataSpec, named: Mapping[str, Iterable[dict]], where: str) -> dict[str, list[dict]]:
    """LAT's splits picked from a source's named splits (``data.split``, else train, the first of
    VALIDATION_NAMES, test)."""
    out = {}
    for split in SPLITS:
        wanted = spec.split.get(split)
        candidates = [wanted] if wanted else [split] if split != "validation" else list(VALIDATION_NAMES)
        found = next((c for c in candidates if c in named), None)
        if found is not None:
            out[split] = [dict(r) for r in named[found]]
        elif wanted or split == "train":
            raise TrainConfigError(f"data.split.{split}: {where} has no split {candidates[0]!r} "
                                   f"(has {', '.join(named)})", field=f"data.split.{split}")
    return out


def read_file(path: Path) -> list[dict]:
    """The rows of a .csv/.tsv (header row), .jsonl, .json (a list, or JSON lines) or .parquet file."""
    try:
        if path.suffix in (".csv", ".tsv"):
            with path.open(newline="", encoding="utf-8") as fh:
                return list(csv.DictReader(fh, delimiter="\t" if path.suffix == ".tsv" else ","))
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            return pq.read_table(path).to_pylist()
        return _json_rows(path)
    except (OSError, UnicodeDecodeError, ValueError, ImportError) as exc:
        raise TrainConfigError(f"data: cannot read {path} ({type(exc).__name__}: {exc})", field="data.path") from None


def _json_rows(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]   # JSON lines
    if isinstance(data, dict):   # one document holding a single list of rows
        data = next((v for v in data.values() if isinstance(v, list)), data)
    if not isinstance(data, list):
        raise ValueError("expected a list of rows (or one row per line)")
    return data


def _held_out(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    shuffled = list(rows)
    random.Random(SPLIT_SEED).shuffle(shuffled)
    cut = max(1, int(round(len(shuffled) * (1 - HELD_OUT))))
    return shuffled[:cut], shuffled[cut:] or shuffled[-1:]


def _check_columns(spec: DataSpec, split: str, rows: list[dict]) -> None:
    if not rows:
        return
    have = list(rows[0])
    for key, column in spec.columns():
        if column not in have:
            raise TrainConfigError(f"data.{key}: the {split} split has no column {column!r} "
                                   f"(columns: {', '.join(map(str, have))})", field=f"data.{key}")


# ----------------------------------------------------------------------------- rows

def _shown(row: dict, columns: str | list[str]) -> str:
    cols = [columns] if isinstance(columns, str) else columns
    return " ".join(f"{c}: {str(row[c]).strip()}" for c in cols)


def _gen_splits(spec: DataSpec, splits: dict[str, list[dict]]) -> tuple[dict[str, list[dict]], tuple]:
    out = {}
    for split, rows in splits.items():
        out[split] = [{"prompt": f"{_shown(r, spec.prompt or [])} {spec.target}:", "target": str(r[spec.target]).strip(),
                       "refs": [str(r[spec.target]).strip()]}
                      for r in rows if r.get(spec.target) not in (None, "")]
    return out, ()


def _cls_splits(spec: DataSpec, splits: dict[str, list[dict]]) -> tuple[dict[str, list[dict]], tuple]:
    assert spec.label is not None and spec.text is not None   # DataSpec._one_task
    labelled = {s: [(r, _label_value(r[spec.label])) for r in rows if r[spec.label] not in UNLABELLED]
                for s, rows in splits.items()}
    words, index = label_space(spec, [v for pairs in labelled.values() for _, v in pairs])
    out = {s: [{"text": f"{_shown(r, spec.text)} label:", "label": index(v)} for r, v in pairs]
           for s, pairs in labelled.items()}
    return out, words


def _label_value(value: object) -> int | str:
    """A label as read (CSV gives text): integral numbers and their text as int, else stripped text."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if text.lstrip("-").isdigit() else text


def label_space(spec: DataSpec, values: list[int | str]):
    """(label words by id, value -> id) for the labels the data holds: ids 0..n-1 as they are
    (words: data.labels, else the ids as text), or text labels (words: data.labels in that order,
    else the distinct labels sorted)."""
    if all(isinstance(v, int) for v in values):
        n = spec.num_labels or (len(spec.labels) if spec.labels else max(values, default=0) + 1)
        bad = next((v for v in values if not 0 <= int(v) < n), None)
        if bad is not None:
            raise TrainConfigError(f"data.label: label {bad} is outside 0..{n - 1} (data.num_labels / data.labels "
                                   "give the number of labels)", field="data.label")
        return tuple(spec.labels or [str(i) for i in range(n)]), int
    if any(isinstance(v, int) for v in values):
        raise TrainConfigError("data.label: the column mixes numbers and words; use one kind, or list the "
                               "words in data.labels", field="data.label")
    words = tuple(spec.labels or sorted({str(v) for v in values}))
    unknown = next((v for v in values if v not in words), None)
    if unknown is not None:
        raise TrainConfigError(f"data.label: label {unknown!r} is not one of data.labels {list(words)}",
                               field="data.label")
    if spec.num_labels is not None and spec.num_labels != len(words):
        raise TrainConfigError(f"data.num_labels: {spec.num_labels}, but the data holds {len(words)} labels "
                               f"({', '.join(words)})", field="data.num_labels")
    return words, words.index
