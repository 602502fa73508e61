"""A dataset the user brings, named by its columns: ``data: {path: ./my.csv, text: sentence, label:
label}`` (classification) or ``data: {path: org/name, prompt: dialogue, target: summary}``
(generation); torch-free, so the job schema, the plan and its preflight check it before anything
starts. The trainer reads it (lat_core.train.own_data).

Why columns and not a format: the shipped readers know their datasets' fields; a user's table has
its own names, and naming them is all LAT needs to pose the task as it poses GLUE ("<col>: <value>
... label: <word>") or SAMSum (prompt, then the target). The number of labels, the label words and
the main metric are taken from the data unless given.

Sources: a local file (``.csv``, ``.tsv``, ``.json``, ``.jsonl``, ``.parquet``; its rows are the
training split and a fifth of them, fixed by seed 42, the validation split), a local folder
(``<split>.<ext>`` files, or one written by ``DatasetDict.save_to_disk``), or a hub id read through
the hub code the shipped datasets use (lat_core.train.hub_data: cache, offline flags). ``split``
maps LAT's splits (train, validation, test) to the source's split names or file stems.
"""
from __future__ import annotations

import csv
import difflib
import json
from pathlib import Path
from typing import Annotated, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from lat_core.config import values as V

CLS_METRICS = ("accuracy", "f1", "mcc")
GEN_METRICS = ("rougeL", "rouge1", "rouge2", "rougeLsum", "bleu")
FILE_TYPES = (".csv", ".tsv", ".json", ".jsonl", ".parquet")
SPLITS = ("train", "validation", "test")
#: the first of these a source has is its validation split when ``split`` names none
VALIDATION_NAMES = ("validation", "valid", "val", "dev")

Columns = Union[str, list[str]]   # one column, or several shown as "<col>: <value>" one after the other


class DataSpec(BaseModel):
    """``data:`` as a mapping. Exactly one of ``label`` (classification, with ``text``) and
    ``target`` (generation, with ``prompt``)."""
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    path: str = Field(min_length=1)
    name: Optional[str] = None           # how folders, tables and logs call it (default: from path)
    config: Optional[str] = None         # a hub dataset's configuration (subset)
    split: dict[str, str] = Field(default_factory=dict)
    text: Optional[Columns] = None
    label: Optional[str] = None
    prompt: Optional[Columns] = None
    target: Optional[str] = None
    labels: Optional[list[str]] = None   # label words in label-id order (default: from the data)
    num_labels: Annotated[Optional[int], BeforeValidator(lambda v: v if v is None else V.POSITIVE_INT.check(v))] = None
    metric: Optional[str] = None         # the main metric (default: accuracy / rougeL)

    @model_validator(mode="after")
    def _one_task(self) -> DataSpec:
        if (self.label is None) == (self.target is None):
            raise ValueError("data: name the column to predict: label (classification, with text) or target "
                             "(generation, with prompt)")
        if self.label is not None and self.text is None:
            raise ValueError("data.text: missing (the column or columns a label is predicted from)")
        if self.target is not None and self.prompt is None:
            raise ValueError("data.prompt: missing (the column or columns the target is generated from)")
        metrics = CLS_METRICS if self.kind == "cls" else GEN_METRICS
        if self.metric is not None and self.metric not in metrics:
            raise ValueError(f"data.metric: {self.metric!r} is not a {self.task_word} metric here "
                             f"(one of {', '.join(metrics)})")
        for key in self.split:
            if key not in SPLITS:
                raise ValueError(f"data.split.{key}: unknown split{_closest(key, SPLITS)} (allowed: {', '.join(SPLITS)})")
        if self.labels is not None and self.num_labels is not None and len(self.labels) != self.num_labels:
            raise ValueError(f"data.labels: {len(self.labels)} words but data.num_labels is {self.num_labels}")
        return self

    @property
    def kind(self) -> str:
        """``cls`` or ``gen``, as lat_core.train.data.Dataset says it."""
        return "cls" if self.label is not None else "gen"

    @property
    def task_word(self) -> str:
        return "classification" if self.kind == "cls" else "generation"

    @property
    def main_metric(self) -> str:
        return self.metric or ("accuracy" if self.kind == "cls" else "rougeL")

    @property
    def display_name(self) -> str:
        """The dataset's name in folders, logs and tables: ``name``, else the file's stem, the
        folder's name or the hub id's last part (with its config)."""
        if self.name:
            return self.name
        stem = Path(self.path).stem if Path(self.path).suffix in FILE_TYPES else Path(self.path).name
        return f"{stem}_{self.config}" if self.config else stem

    def columns(self) -> list[tuple[str, str]]:
        """(spec key, column) of every column the task reads."""
        out = []
        for key in ("text", "label", "prompt", "target"):
            value = getattr(self, key)
            out += [(key, c) for c in ([value] if isinstance(value, str) else value or [])]
        return out


class DataSpecError(ValueError):
    """A ``data:`` mapping that cannot be used; ``field`` is the dotted key at fault."""

    def __init__(self, message: str, field: str = "data"):
        super().__init__(message)
        self.field = field


def parse_spec(raw: dict[object, object], base: Path) -> DataSpec:
    """The checked spec of a ``data:`` mapping, a local ``path`` made absolute against ``base`` (the
    job file's folder, the plan's); DataSpecError naming the key."""
    for key in raw:
        if key not in DataSpec.model_fields:
            raise DataSpecError(f"data.{key}: unknown key{_closest(str(key), DataSpec.model_fields)} "
                                f"(allowed: {', '.join(DataSpec.model_fields)})", f"data.{key}")
    try:
        spec = DataSpec.model_validate(raw)
    except ValidationError as exc:
        raise _spec_error(exc) from None
    return spec.model_copy(update={"path": resolve_path(spec.path, base)})


def _spec_error(exc: ValidationError) -> DataSpecError:
    err = exc.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    loc = [str(p) for p in err["loc"] if p not in ("str", "list[str]")]
    if not loc:   # a check across keys: the message names its key
        return DataSpecError(msg, msg.split(":")[0])
    field = "data." + ".".join(loc)
    return DataSpecError(f"{field}: {msg.lower()}, got {err['input']!r}", field)


def _closest(word: str, choices: object) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)  # type: ignore[call-overload]
    return f" (did you mean {close[0]!r}?)" if close else ""


def is_local(path: str) -> bool:
    """A path that must be on this machine: absolute, ``./``/``~``-relative or a data file's name."""
    return path.startswith(("/", ".", "~")) or Path(path).suffix in FILE_TYPES


def resolve_path(path: str, base: Path) -> str:
    """An existing local file or folder as an absolute path; a hub id as it is; DataSpecError for a
    local path that is not there."""
    local = (base / Path(path).expanduser()).resolve()
    if local.exists():
        return str(local)
    if is_local(path):
        raise DataSpecError(f"data.path: no such file or folder {str(local)!r}", "data.path")
    return path


# ----------------------------------------------------------------------------- cheap column checks

def local_files(spec: DataSpec) -> dict[str, Path] | None:
    """LAT split -> the local file holding it; None for a hub id or a saved DatasetDict (whose
    columns the trainer checks); DataSpecError when a split's file is not in the folder."""
    path = Path(spec.path)
    if not path.is_absolute() or not path.exists() or (path / "dataset_dict.json").is_file():
        return None
    if path.is_file():
        if spec.split:
            raise DataSpecError(f"data.split: {path} is one file, whose rows are the training split (a fifth held "
                                "out for validation); split files go in a folder: <split>.<ext>", "data.split")
        return {"train": path}
    out = {}
    for split in SPLITS:
        stems = [spec.split[split]] if split in spec.split else [split] if split != "validation" else list(VALIDATION_NAMES)
        found = [path / f"{stem}{ext}" for stem in stems for ext in FILE_TYPES if (path / f"{stem}{ext}").is_file()]
        if found:
            out[split] = found[0]
        elif split == "train" or split in spec.split:
            raise DataSpecError(f"data.split.{split}: no file {stems[0]}.<{'|'.join(t[1:] for t in FILE_TYPES)}> "
                                f"in {path}", f"data.split.{split}")
    return out


def columns_problem(spec: DataSpec) -> str | None:
    """A column the spec names that a local file lacks (read from its header or first row), or a
    missing split file; None when every local file has them (or the source is not local)."""
    try:
        files = local_files(spec) or {}
        for file in files.values():
            have = file_columns(file)
            if have is None:
                continue
            for key, column in spec.columns():
                if column not in have:
                    return (f"data.{key}: no column {column!r} in {file}{_closest(column, have)} "
                            f"(columns: {', '.join(have)})")
    except DataSpecError as exc:
        return str(exc)
    return None


def file_columns(path: Path) -> list[str] | None:
    """The column names of a data file, reading as little as its format allows; None when the
    format cannot say cheaply (parquet without pyarrow, an empty file)."""
    try:
        if path.suffix in (".csv", ".tsv"):
            with path.open(newline="", encoding="utf-8") as fh:
                return next(csv.reader(fh, delimiter="\t" if path.suffix == ".tsv" else ","), None)
        if path.suffix == ".parquet":
            return _parquet_columns(path)
        first = _first_record(path)
        return list(first) if isinstance(first, dict) else None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataSpecError(f"data.path: cannot read {path} ({exc})", "data.path") from None


def _parquet_columns(path: Path) -> list[str] | None:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]  # no stubs
    except ImportError:
        return None
    return list(pq.read_schema(path).names)


def _first_record(path: Path) -> object:
    """The first row of a JSON-lines file, or of a JSON list."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    break   # not JSON lines: one JSON document
    data = json.loads(path.read_text(encoding="utf-8"))
    return data[0] if isinstance(data, list) and data else None
