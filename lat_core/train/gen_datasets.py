"""Readers for the generation datasets: SAMSum, DART, Spider (sources and their order: datasets.py).

Each reads a local folder (JSON as released, CSV for SAMSum as the old scripts kept it, or a
`DatasetDict.save_to_disk` folder) and otherwise the hub id through hub_data.py.
"""
from __future__ import annotations

import csv
import json
import random
import sqlite3
from pathlib import Path

from lat_core.config.job import TrainConfigError
from . import hub_data
from .data import Dataset
from .datasets import ENV_VARS, SPLIT_SEED, _local_dir, _need


# ----------------------------------------------------------------------------- SAMSum

def _read_json_list(path: Path, var: str) -> list:
    _need(path, var)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TrainConfigError(f"data: {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, list):
        raise TrainConfigError(f"data: {path} must hold a JSON list of examples")
    return data


def _raw_splits(family: str, data_dir: str, environ: dict, local_files: dict[str, Path | None]):
    """{split: rows}: a saved DatasetDict or the local JSON files when a local folder is set
    (`local_files(root)` maps split -> file), else the hub id (hub_data.py)."""
    var = ENV_VARS[family]
    root = _local_dir(family, data_dir, environ)
    if root is None:
        return hub_data.fetch(family, None, var, environ)
    if hub_data.is_saved_dataset(root):
        return hub_data.from_disk(root, var)
    return {split: _read_rows(path, var) for split, path in local_files(root).items()}


def _read_rows(path: Path, var: str) -> list:
    """A JSON list of examples, or a CSV file with a header row (the old scripts' SAMSum folders)."""
    if path.suffix != ".csv":
        return _read_json_list(path, var)
    with _need(path, var).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _first_file(root: Path, names: tuple[str, ...], var: str) -> Path:
    for name in names:
        if (root / name).is_file():
            return root / name
    raise TrainConfigError(f"data: {root} has none of {', '.join(names)} (set {var} or data_dir to the "
                           "dataset's folder)")


def _split(raw, split: str, family: str, alternatives: tuple[str, ...] = ()):
    for name in (split, *alternatives):
        if name in raw:
            return raw[name]
    raise TrainConfigError(f"data: {family} has no {split!r} split (has {', '.join(raw)})")


SAMSUM_FILES = {"train": ("train.json", "train.csv"),
                "validation": ("val.json", "validation.json", "validation.csv", "dev.csv", "val.csv"),
                "test": ("test.json", "test.csv")}


def load_samsum(data_dir: str, environ: dict) -> Dataset:
    """Local: SAMSUM_FILES, JSON lists or CSV files of {id, dialogue, summary}; the hub's
    Samsung/samsum has the same fields."""
    var = ENV_VARS["samsum"]
    raw = _raw_splits("samsum", data_dir, environ,
                      lambda root: {k: _first_file(root, names, var) for k, names in SAMSUM_FILES.items()})

    def rows(split):
        return [{"prompt": f"summarize: {r['dialogue'].strip()} summary:", "target": r["summary"].strip(),
                 "refs": [r["summary"].strip()], "id": r.get("id")} for r in _split(raw, split, "samsum")]
    return Dataset("samsum", rows("train"), rows("validation"), kind="gen", task="samsum", test=rows("test"))


# ----------------------------------------------------------------------------- DART

def _dart_file(root: Path, split: str) -> Path:
    for cand in (root / f"{split}.json", *sorted(root.glob(f"*-{split}.json"))):
        if cand.is_file():
            return cand
    return root / f"dart-v1.1.1-full-{split}.json"


def _dart_texts(r: dict) -> tuple[list[str], list[str]]:
    """(targets to train on, references to score against) of one row in any of the layouts:
    the release's annotations [{text}], the hub's annotations {text: [...]}, GEM's target/references."""
    ann = r.get("annotations")
    if isinstance(ann, dict):
        texts = list(ann.get("text") or [])
    elif ann:
        texts = [a.get("text") for a in ann]
    else:  # GEM/dart: one row per target; references hold every text of the input (eval splits)
        target = [r["target"]] if r.get("target") else []
        return target, list(r.get("references") or []) or target
    texts = [t.strip() for t in texts if t]
    return texts, texts


def _dart_rows(raw_rows, explode: bool) -> list[dict]:
    """Training rows: one per target; evaluation rows: one per input with all references.  GEM
    repeats an input once per target on its evaluation splits: rows with the same triples and the
    same references are one input (inputs may share triples, never all their references)."""
    groups: dict[tuple, tuple[str, list[str], list[str]]] = {}
    for i, r in enumerate(raw_rows):
        triples = " && ".join(" | ".join(str(x) for x in t) for t in r["tripleset"])
        targets, refs = _dart_texts(r)
        refs = [t.strip() for t in refs if t and t.strip()]
        if not refs:
            continue
        prompt = f"triples: {triples} text:"
        key = ("input", prompt, tuple(refs)) if r.get("references") else ("row", i)
        _, ts, rs = groups.setdefault(key, (prompt, [], []))
        ts.extend(t.strip() for t in targets if t and t.strip())
        rs.extend(t for t in refs if t not in rs)
    if explode:
        return [{"prompt": p, "target": t, "refs": rs} for p, ts, rs in groups.values() for t in ts]
    return [{"prompt": p, "target": rs[0], "refs": rs} for p, _, rs in groups.values()]


def load_dart(data_dir: str, environ: dict) -> Dataset:
    """Local: dart-v1.1.1-full-{train,dev,test}.json, [{tripleset: [[s, p, o]], annotations: [{text}]}];
    hub: `dart` (or DART_HUB_ID=GEM/dart), splits train/validation/test."""
    raw = _raw_splits("dart", data_dir, environ,
                      lambda root: {s: _dart_file(root, f) for s, f in
                                    (("train", "train"), ("validation", "dev"), ("test", "test"))})
    return Dataset("dart", _dart_rows(_split(raw, "train", "dart"), True),
                   _dart_rows(_split(raw, "validation", "dart"), False), kind="gen", task="dart",
                   test=_dart_rows(_split(raw, "test", "dart"), False))


# ----------------------------------------------------------------------------- Spider

def sqlite_schema(db_path: Path) -> str:
    """"table(col, col) table(col)" read from the database itself."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        parts = []
        for t in tables:
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
            parts.append(f"{t}({', '.join(cols)})")
        return " ".join(parts)
    finally:
        con.close()


def _spider_raw(root: Path, environ: dict):
    """{train, validation} rows: train_spider.json + dev.json in the folder, a saved DatasetDict
    there, or, for a folder holding only database/, the questions of the hub's xlangai/spider."""
    var = ENV_VARS["spider"]
    if (root / "train_spider.json").is_file():
        return {"train": _read_json_list(root / "train_spider.json", var),
                "validation": _read_json_list(root / "dev.json", var)}
    if hub_data.is_saved_dataset(root):
        return hub_data.from_disk(root, var)
    return hub_data.fetch("spider", None, var, environ)


def load_spider(data_dir: str, environ: dict) -> Dataset:
    """[{db_id, question, query}] rows (see _spider_raw) and database/<db>/<db>.sqlite.

    Train is divided 80/20 into train/validation (fixed seed); dev (the hub's validation) is the
    test split.  The databases give the prompt's schema and execution accuracy, and the hub lacks them.
    """
    var = ENV_VARS["spider"]
    root = _local_dir("spider", data_dir, environ)
    if root is None:
        raise TrainConfigError(f"data: spider needs its SQLite databases, which are not on the hub: set "
                               f"{var} (or data_dir) to a folder with database/<db>/<db>.sqlite "
                               "(and train_spider.json + dev.json, else the questions come from "
                               f"{hub_data.hub_id('spider', environ)})")
    db_root = _need(root / "database", var)
    raw = _spider_raw(root, environ)
    schemas: dict[str, str] = {}

    def rows(split):
        out = []
        for r in _split(raw, split, "spider", ("dev",)):
            db = r["db_id"]
            if db not in schemas:
                schemas[db] = sqlite_schema(_need(db_root / db / f"{db}.sqlite", var))
            out.append({"prompt": f"database: {db} schema: {schemas[db]} question: {r['question'].strip()} sql:",
                        "target": r["query"].strip(), "refs": [r["query"].strip()], "db_id": db})
        return out
    train = rows("train")
    random.Random(SPLIT_SEED).shuffle(train)
    cut = max(1, int(round(len(train) * 0.8)))
    return Dataset("spider", train[:cut], train[cut:] or train[-1:], kind="gen", task="spider",
                   test=rows("validation"), info={"db_root": str(db_root)})
