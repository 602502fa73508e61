"""The hub-id path of the dataset readers (lat_core/train/hub_data.py).

The hub is unreachable here, so the one call into it (`hub_data._load_dataset`) is replaced by one
that records the id and config it was asked for and answers with a real DatasetDict read back with
`load_from_disk`, built from the same fixtures the local readers use: the hub path must give the
very rows the local path gives.  The offline cache hit and the offline error are the real
`datasets` in offline mode.
"""
import json
from pathlib import Path

import pytest

from lat_core.config.job import TrainConfigError
from lat_core.train import data as D
from lat_core.train import hub_data

datasets = pytest.importorskip("datasets")

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "datasets"
OFFLINE = {"HF_HUB_OFFLINE": "1"}


def _json(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _saved(tmp_path: Path, splits: dict[str, list[dict]], name: str = "saved") -> Path:
    dd = datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()})
    dd.save_to_disk(str(tmp_path / name))
    return tmp_path / name


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """Serve {(hub id, config): saved folder}; records the calls."""
    served: dict[tuple, Path] = {}
    calls: list[tuple] = []

    def load(_datasets, name, config, cache_dir):
        calls.append((name, config))
        return datasets.load_from_disk(str(served[(name, config)]))
    monkeypatch.setattr(hub_data, "_load_dataset", load)
    return served, calls


def _rows(ds):
    return ds.train, ds.validation, ds.test, ds.extra_tests


def test_glue_by_hub_id_equals_the_local_copy(hub, tmp_path):
    served, calls = hub
    rte = FIX / "glue_hub" / "rte"
    served[("nyu-mll/glue", "rte")] = _saved(tmp_path, {
        "train": _jsonl(rte / "train.jsonl"), "validation": _jsonl(rte / "validation.jsonl"),
        "test": [{**r, "label": -1} for r in _jsonl(rte / "validation.jsonl")]})
    local = D.load_dataset("rte", environ={"GLUE_LOCAL_DIR": str(FIX / "glue_hub")})
    assert _rows(D.load_dataset("rte", environ={})) == _rows(local) and calls == [("nyu-mll/glue", "rte")]


def test_samsum_by_hub_id_and_from_a_saved_folder(hub, tmp_path):
    served, calls = hub
    src = FIX / "samsum"
    folder = _saved(tmp_path, {"train": _json(src / "train.json"), "validation": _json(src / "val.json"),
                               "test": _json(src / "test.json")})
    served[("Samsung/samsum", None)] = folder
    local = _rows(D.load_dataset("samsum", environ={"SAMSUM_LOCAL_DIR": str(src)}))
    assert _rows(D.load_dataset("samsum", environ={})) == local and calls == [("Samsung/samsum", None)]
    assert _rows(D.load_dataset("samsum", environ={"SAMSUM_LOCAL_DIR": str(folder)})) == local
    assert len(calls) == 1  # the saved folder is a local copy: no hub call


def _dart_hub_rows(rows):
    """The hub's `dart`: annotations as a column of lists (a datasets Sequence of dicts)."""
    return [{"tripleset": r["tripleset"], "subtree_was_extended": r["subtree_was_extended"],
             "annotations": {"source": [a["source"] for a in r["annotations"]],
                             "text": [a["text"] for a in r["annotations"]]}} for r in rows]


def _gem_rows(rows, split):
    """GEM/dart: one row per target text; references (every text of the input) on eval splits."""
    return [{"gem_id": f"{split}-{i}-{j}", "tripleset": r["tripleset"], "target": a["text"],
             "references": [] if split == "train" else [b["text"] for b in r["annotations"]]}
            for i, r in enumerate(rows) for j, a in enumerate(r["annotations"])]


def test_dart_by_hub_id_in_both_editions(hub, tmp_path):
    served, calls = hub
    files = {s: _json(FIX / "dart" / f"dart-v1.1.1-full-{f}.json")
             for s, f in (("train", "train"), ("validation", "dev"), ("test", "test"))}
    served[("dart", None)] = _saved(tmp_path, {s: _dart_hub_rows(r) for s, r in files.items()}, "dart")
    served[("GEM/dart", None)] = _saved(tmp_path, {s: _gem_rows(r, s) for s, r in files.items()}, "gem")
    local = _rows(D.load_dataset("dart", environ={"DART_LOCAL_DIR": str(FIX / "dart")}))
    assert _rows(D.load_dataset("dart", environ={})) == local
    gem = D.load_dataset("dart", environ={"DART_HUB_ID": "GEM/dart"})
    assert _rows(gem)[1:] == local[1:]
    # GEM's training rows carry their own text only (training refs feed the vocabulary, not scores)
    assert [(r["prompt"], r["target"]) for r in gem.train] == [(r["prompt"], r["target"]) for r in local[0]]
    assert calls == [("dart", None), ("GEM/dart", None)]


def test_spider_questions_from_the_hub_databases_local(hub, tmp_path):
    served, calls = hub
    src = FIX / "spider"
    served[("xlangai/spider", None)] = _saved(tmp_path, {"train": _json(src / "train_spider.json"),
                                                         "validation": _json(src / "dev.json")})
    only_db = tmp_path / "spider"
    only_db.mkdir()
    (only_db / "database").symlink_to(src / "database")
    local = D.load_dataset("spider", environ={"SPIDER_LOCAL_DIR": str(src)})
    hub_ds = D.load_dataset("spider", environ={"SPIDER_LOCAL_DIR": str(only_db)})
    assert _rows(hub_ds) == _rows(local) and calls == [("xlangai/spider", None)]
    assert hub_ds.info["db_root"] == str(only_db / "database")


def _fill_cache(cache: Path, hub_id: str, files: dict[str, Path]) -> None:
    """What `load_dataset(hub_id)` online leaves in the datasets cache: a prepared dataset under
    <cache>/<namespace>___<name>/<config>/<version>/<hash>/ (built here from local JSON)."""
    from datasets.packaged_modules.json.json import Json
    builder = Json(cache_dir=str(cache / "build"), dataset_name=hub_id.split("/")[-1], config_name="default",
                   data_files={k: str(v) for k, v in files.items()})
    builder.download_and_prepare()
    target = cache / hub_id.replace("/", "___") / "default" / "0.0.0"
    target.mkdir(parents=True)
    Path(builder.cache_dir).rename(target / "0123abcd")


def test_offline_reads_the_hub_id_from_the_datasets_cache(tmp_path):
    src = FIX / "samsum"
    cache = tmp_path / "cache"
    _fill_cache(cache, "Samsung/samsum", {"train": src / "train.json", "validation": src / "val.json",
                                          "test": src / "test.json"})
    cached = D.load_dataset("samsum", environ={**OFFLINE, "HF_DATASETS_CACHE": str(cache)})
    assert _rows(cached) == _rows(D.load_dataset("samsum", environ={"SAMSUM_LOCAL_DIR": str(src)}))


@pytest.mark.parametrize("name, hub_id, var", [("glue-tvt_cola", "nyu-mll/glue cola", "GLUE_LOCAL_DIR"),
                                               ("samsum", "Samsung/samsum default", "SAMSUM_LOCAL_DIR"),
                                               ("dart", "dart default", "DART_LOCAL_DIR")])
def test_offline_without_cache_is_a_clear_hub_unreachable_error(tmp_path, name, hub_id, var):
    from lat_core.triage.classify import classify
    env = {**OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    with pytest.raises(TrainConfigError) as err:
        D.load_dataset(name, environ=env)
    msg = str(err.value)
    assert f"cannot fetch {hub_id} from the hub (offline (HF_HUB_OFFLINE set)" in msg
    assert str(tmp_path / "cache") in msg and var in msg
    log = tmp_path / "train.log"
    log.write_text(f"error: {msg}\n")
    assert classify(log, 2).cls == "hub_unreachable"



def test_a_script_only_hub_dataset_is_not_called_unreachable(monkeypatch, tmp_path):
    from lat_core.triage.classify import classify

    def script_only(_datasets, name, config, cache_dir):
        raise RuntimeError("Dataset scripts are no longer supported, but found samsum.py")
    monkeypatch.setattr(hub_data, "_load_dataset", script_only)
    with pytest.raises(TrainConfigError, match=r"Samsung/samsum on the hub is a loading script.*SAMSUM_LOCAL_DIR"):
        D.load_dataset("samsum", environ={})
    log = tmp_path / "train.log"
    try:
        D.load_dataset("samsum", environ={})
    except TrainConfigError as exc:
        log.write_text(f"error: {exc}\n")
    assert classify(log, 2).cls != "hub_unreachable"
