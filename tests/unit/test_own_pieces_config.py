"""What a user brings, checked without torch before anything starts: the ``data:`` mapping, the
deny-list of train.args, callback paths, the preflight's column and module checks, and fusion's
refusal that says why such a job trains alone (lat_core.config.user_data, train_args, fuse)."""
from pathlib import Path

import pytest
import yaml

from lat_core.config.fuse import fuse_key, refusal
from lat_core.config.job import TrainConfigError, parse_config
from lat_core.front.preflight import own_pieces_problems

ROOT = Path(__file__).resolve().parents[2]


def cfg(tmp: Path, data: object = "tiny-sst2", **train) -> object:
    raw = yaml.safe_load((ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml").read_text())
    raw["train"].update(train)
    raw.update(data=data, output_dir=str(tmp))
    return parse_config(raw, tmp / "job.yaml", environ={})


@pytest.fixture
def reviews(tmp_path):
    (tmp_path / "reviews.csv").write_text("review,sentiment\nnice one,good\nawful,bad\n")
    return tmp_path


def test_a_data_mapping_is_checked_and_its_path_made_absolute(reviews):
    c = cfg(reviews, {"path": "reviews.csv", "text": "review", "label": "sentiment"})
    assert c.data.path == str(reviews / "reviews.csv") and c.data.kind == "cls"
    assert c.data_name == "reviews" and c.data.main_metric == "accuracy"


@pytest.mark.parametrize("data, field, needle", [
    ({"path": "reviews.csv", "text": "review"}, "data", "name the column to predict"),
    ({"path": "reviews.csv", "label": "sentiment"}, "data.text", "data.text: missing"),
    ({"path": "reviews.csv", "text": "review", "label": "sentiment", "metric": "rougeL"}, "data.metric",
     "'rougeL' is not a classification metric here (one of accuracy, f1, mcc)"),
    ({"path": "reviews.csv", "text": "review", "label": "sentiment", "split": {"valid": "dev"}}, "data.split.valid",
     "unknown split"),
    ({"path": "reviews.csv", "text": "review", "label": "sentiment", "num_labels": 0}, "data.num_labels",
     "a positive integer"),
    ({"path": "gone.csv", "text": "review", "label": "sentiment"}, "data.path", "no such file or folder"),
])
def test_a_bad_data_mapping_names_its_key(reviews, data, field, needle):
    with pytest.raises(TrainConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")) as err:
        cfg(reviews, data)
    assert err.value.field == field


def test_train_args_owned_by_lat_are_refused_naming_what_to_use(tmp_path):
    with pytest.raises(TrainConfigError) as err:
        cfg(tmp_path, args={"optim": "sgd"})
    assert err.value.field == "train.args.optim" and "LAT builds AdamW itself" in str(err.value)
    assert cfg(tmp_path, args={"label_smoothing_factor": 0.1}).train.args == {"label_smoothing_factor": 0.1}


def test_preflight_finds_a_missing_column_and_a_missing_callback_module(reviews):
    c = cfg(reviews, {"path": "reviews.csv", "text": "review", "label": "stars"},
            callbacks=["json:JSONDecoder", "surely_not_installed.sub:Cb", "json.nope:Cb"])
    problems = own_pieces_problems(c, {})
    assert problems == [
        "train.callbacks: cannot import 'surely_not_installed.sub:Cb': no module 'surely_not_installed' on the job's "
        "Python path",
        "train.callbacks: cannot import 'json.nope:Cb': no module 'json.nope' on the job's Python path",
        f"data.label: no column 'stars' in {reviews / 'reviews.csv'} (columns: review, sentiment)"]


def test_split_names_need_a_folder_of_split_files(reviews):
    c = cfg(reviews, {"path": "reviews.csv", "text": "review", "label": "sentiment", "split": {"test": "test"}})
    assert own_pieces_problems(c, {})[0].startswith("data.split: ") and "is one file" in own_pieces_problems(c, {})[0]


def test_preflight_reads_the_job_pythonpath_for_callbacks(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "cbs.py").write_text("raise SystemExit('never run by the preflight')\n")
    c = cfg(tmp_path, callbacks=["pkg.cbs:Cb"])
    assert own_pieces_problems(c, {"PYTHONPATH": str(tmp_path)}) == []
    assert own_pieces_problems(c, {}) != []


@pytest.mark.parametrize("data, train, says", [
    ({"path": "reviews.csv", "text": "review", "label": "sentiment"}, {}, "data as columns"),
    ("tiny-sst2", {"args": {"label_smoothing_factor": 0.1}}, "train.args (label_smoothing_factor)"),
    ("tiny-sst2", {"callbacks": ["json:JSONDecoder"]}, "train.callbacks"),
    ("tiny-sst2", {"early_stopping_patience": 2}, "train.early_stopping"),
])
def test_a_job_with_its_own_pieces_trains_alone_and_says_why(reviews, data, train, says):
    c = cfg(reviews, data, **train)
    assert fuse_key(c) is None
    assert says in refusal(c) and "trains alone" in refusal(c)
    assert fuse_key(cfg(reviews)) is not None
