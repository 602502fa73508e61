"""Dataset readers on the shipped fixtures (published formats) and metrics vs independent values."""
import math
from pathlib import Path

import pytest

from lat_core.train import data as D
from lat_core.train import metrics as M
from lat_core.config.job import TrainConfigError

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "datasets"
ENV = {"GLUE_LOCAL_DIR": str(FIX / "glue"), "SAMSUM_LOCAL_DIR": str(FIX / "samsum"),
       "DART_LOCAL_DIR": str(FIX / "dart"), "SPIDER_LOCAL_DIR": str(FIX / "spider")}


@pytest.mark.parametrize("task, n_labels", [("cola", 2), ("sst2", 2), ("mrpc", 2), ("qqp", 2), ("stsb", 6),
                                            ("mnli", 3), ("qnli", 2), ("rte", 2)])
def test_glue_tsv_tvt_split(task, n_labels):
    ds = D.load_dataset(f"glue-tvt_{task}", environ=ENV)
    n_train = 21 if task == "mnli" else 20
    assert len(ds.train) + len(ds.validation) == n_train and len(ds.train) == round(n_train * 0.8)
    assert len(ds.test) == (9 if task == "mnli" else 8) and len(ds.label_words) == n_labels
    assert all(0 <= r["label"] < n_labels and r["text"].endswith("label:") for r in ds.train + ds.test)
    if task == "mnli":
        assert len(ds.extra_tests["mm"]) == 9
    if task == "stsb":
        assert all(isinstance(r["score"], float) for r in ds.train)
    again = D.load_dataset(f"glue-tvt_{task}", environ=ENV)
    assert again.train == ds.train  # fixed split seed


def test_glue_hub_jsonl_layout_short_name_and_subset():
    env = {"GLUE_LOCAL_DIR": str(FIX / "glue_hub")}
    ds = D.load_dataset("rte", environ=env)
    assert len(ds.train) == 16 and len(ds.test) == 6
    sub = D.load_dataset("glue-tvt_rte_5", environ=env)
    assert len(sub.train) == 5 and len(sub.test) == 5 and sub.train == ds.train[:5]


def test_missing_dir_names_path_and_env_var(tmp_path):
    with pytest.raises(TrainConfigError, match="GLUE_LOCAL_DIR"):
        D.load_dataset("glue-tvt_cola", environ={"GLUE_LOCAL_DIR": str(tmp_path / "nope")})
    with pytest.raises(TrainConfigError, match=r"train\.tsv.*GLUE_LOCAL_DIR"):
        D.load_dataset("glue-tvt_cola", environ={"GLUE_LOCAL_DIR": str(tmp_path)})
    with pytest.raises(TrainConfigError, match=r"samsum has none of val\.json, validation\.json, validation\.csv, dev\.csv.*SAMSUM_LOCAL_DIR"):
        (tmp_path / "samsum").mkdir()
        (tmp_path / "samsum" / "train.json").write_text("[]")
        D.load_dataset("samsum", environ={"SAMSUM_LOCAL_DIR": str(tmp_path / "samsum")})
    with pytest.raises(TrainConfigError, match=r"databases, which are not on the hub.*SPIDER_LOCAL_DIR"):
        D.load_dataset("spider", environ={})


def test_generation_datasets():
    s = D.load_dataset("samsum", environ=ENV)
    assert (len(s.train), len(s.validation), len(s.test)) == (12, 4, 4) and s.kind == "gen"
    assert s.train[0]["prompt"].startswith("summarize: Amy:") and s.train[0]["target"].startswith("Amy")
    d = D.load_dataset("dart", environ=ENV)
    assert len(d.train) == 20 and len(d.validation) == 4 and len(d.validation[0]["refs"]) == 2
    assert "Cat | colour |" in d.train[0]["prompt"]
    sp = D.load_dataset("spider", environ=ENV)
    assert len(sp.train) == 8 and len(sp.test) == 4 and "pet(id, name, age)" in sp.train[0]["prompt"]
    assert Path(sp.info["db_root"], "pets", "pets.sqlite").is_file()


def test_classification_metrics_match_hand_counts():
    golds = [1, 1, 0, 0, 1, 0, 1, 1]
    preds = [1, 0, 0, 1, 1, 0, 1, 0]
    tp, tn, fp, fn = 3, 2, 1, 2
    mcc = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    out = M.classification("cola", preds, golds)
    assert out["accuracy"] == pytest.approx(5 / 8) and out["mcc"] == pytest.approx(mcc)
    f1 = 2 * tp / (2 * tp + fp + fn)
    assert M.classification("mrpc", preds, golds)["f1"] == pytest.approx(f1)
    assert set(M.classification("rte", preds, golds)) == {"accuracy"}


def test_regression_metrics():
    import numpy as np
    x = [0.5, 1.0, 2.5, 3.0, 4.5]
    y = [0.0, 2.0, 2.0, 3.5, 5.0]
    out = M.regression(x, y)
    assert out["pearson"] == pytest.approx(float(np.corrcoef(x, y)[0, 1]))
    rx, ry = [1, 2, 3, 4, 5], [1, 2.5, 2.5, 4, 5]  # ranks (ties averaged)
    assert out["spearman"] == pytest.approx(float(np.corrcoef(rx, ry)[0, 1]))
    assert M.regression([1, 1, 1], [1, 2, 3])["pearson"] is None


def test_rouge_and_bleu():
    out = M.rouge(["the cat sat"], ["the cat sat down"])
    # unigram: p=3/3, r=3/4 -> f=6/7; bigram: 2/2, 2/3 -> 0.8; LCS = 3 -> same as rouge1
    assert out["rouge1"] == pytest.approx(6 / 7) and out["rouge2"] == pytest.approx(0.8)
    assert out["rougeL"] == pytest.approx(6 / 7)
    assert M.bleu(["the cat is on the mat"], [["the cat is on the mat"]])["bleu"] == pytest.approx(1.0)  # 0-1
    assert M.bleu(["a b"], [["x y z w", "q r s t"]])["bleu"] == pytest.approx(0.0)


def test_spider_metrics():
    db_root = FIX / "spider" / "database"
    preds = ["select COUNT(*) from pet", "SELECT name FROM pet WHERE age >= 3", "SELECT nonsense", "SELECT age FROM pet"]
    golds = ["SELECT count(*) FROM pet", "SELECT name FROM pet WHERE age > 2", "SELECT max(age) FROM pet",
             "SELECT name FROM pet"]
    out = M.spider(preds, golds, ["pets"] * 4, db_root)
    assert out["exact_match"] == pytest.approx(1 / 4)  # only the first, after case/space normalising
    assert out["exec_accuracy"] == pytest.approx(2 / 4)  # first two return the same rows


def test_samsum_csv_folder_of_the_old_scripts_reads_like_the_json_one(tmp_path):
    import csv
    import json
    for split, src in (("train", "train.json"), ("dev", "val.json"), ("test", "test.json")):
        rows = json.loads((FIX / "samsum" / src).read_text())
        with (tmp_path / f"{split}.csv").open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=["id", "dialogue", "summary"])
            writer.writeheader()
            writer.writerows(rows)
    from_csv = D.load_dataset("samsum", environ={"SAMSUM_LOCAL_DIR": str(tmp_path)})
    from_json = D.load_dataset("samsum", environ=ENV)
    assert (from_csv.train, from_csv.validation, from_csv.test) == (from_json.train, from_json.validation,
                                                                   from_json.test)
