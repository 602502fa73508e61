"""Bring your own data and Trainer pieces (README "Bring your own data and Trainer pieces"): a
user's CSV / JSON-lines / saved dataset named by its columns trains and evaluates on a tiny GLA;
train.args reach TrainingArguments; a callback by import path runs; early stopping ends a stalled
job early and successfully; what cannot work is exit 2 naming the key."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.config.job import TrainConfigError, parse_config
from lat_core.contract.jobdir import EarlyStop, Eval, Finished, JobDir, Started
from lat_core.train.loop import run
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
TINY_SST2 = ROOT / "lat_core" / "data" / "tiny_sst2"
CALLBACK = '''
import json, os
from transformers import TrainerCallback

class RecordArgs(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        seen = {"label_smoothing_factor": args.label_smoothing_factor, "max_grad_norm": args.max_grad_norm}
        with open(os.path.join(args.output_dir, "seen_by_callback.json"), "w") as fh:
            json.dump(seen, fh)
'''


def sst2_rows() -> list[dict]:
    return [json.loads(line) for split in ("train", "validation")
            for line in (TINY_SST2 / f"{split}.jsonl").read_text().splitlines()]


def write_csv(path: Path) -> Path:
    """The tiny SST-2 rows under the user's own column names, labels as words."""
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["review", "sentiment"])
        for row in sst2_rows():
            out.writerow([row["sentence"], "good" if row["label"] else "bad"])
    return path


def job_raw(tmp: Path, data: object, **train) -> dict:
    raw = yaml.safe_load((ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml").read_text())
    raw["train"].update({"max_steps": 6, "eval_every": 3, "save_every": 100, "log_every": 1, **train})
    raw["data"] = data
    raw["output_dir"] = str(tmp / "out")
    return raw


def train_in_process(tmp: Path, raw: dict) -> list:
    cfg = parse_config(raw, tmp / "job.yaml", environ={})
    job = JobDir(cfg.output_dir)
    with job.event_writer() as ev:
        run(cfg, ev, resume=False, argv=["--cfg", "job.yaml"])
    return list(job.read_events().events)


def train_cli(tmp: Path, raw: dict, pythonpath: str = "") -> subprocess.CompletedProcess:
    (tmp / "job.yaml").write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), pythonpath) if p)}
    return subprocess.run([sys.executable, "-m", "lat_core.train", "--cfg", str(tmp / "job.yaml")], cwd=tmp,
                          env=env, capture_output=True, text=True, timeout=HANG_S)


def test_own_csv_with_word_labels_trains_and_evaluates_on_its_metric(tmp_path):
    write_csv(tmp_path / "reviews.csv")
    evs = train_in_process(tmp_path, job_raw(tmp_path, {"path": "./reviews.csv", "text": "review",
                                                        "label": "sentiment", "metric": "mcc"}))
    started, finished = evs[0], evs[-1]
    assert isinstance(started, Started) and started.data == "reviews"
    evals = [e for e in evs if isinstance(e, Eval)]
    assert [e.step for e in evals] == [3, 6] and all({"mcc", "accuracy", "loss"} <= set(e.metrics) for e in evals)
    assert isinstance(finished, Finished) and finished.best["metric"] == "mcc"
    assert (started.metric, started.higher_is_better) == ("mcc", True)  # what results rank it by
    # a fifth of the 264 rows held out for validation (no validation split in one file)
    assert len(list((tmp_path / "out" / "predictions").glob("step-6-validation.jsonl"))) == 1
    assert len((tmp_path / "out" / "predictions" / "step-6-validation.jsonl").read_text().splitlines()) == 53


def test_results_rank_own_data_by_the_metric_it_names(tmp_path):
    """`metric: mcc` on data whose task ("own") ranks by accuracy: the results table ranks by MCC,
    its best checkpoint is the best MCC among the checkpointed evaluations, accuracy beside it."""
    from lat_core.results import aggregate, build_tables
    write_csv(tmp_path / "reviews.csv")
    raw = job_raw(tmp_path, {"path": "./reviews.csv", "text": "review", "label": "sentiment", "metric": "mcc"},
                  save_every=3)
    evs = train_in_process(tmp_path, raw)
    mcc = {e.step: e.metrics["mcc"] for e in evs if isinstance(e, Eval) and e.split == "validation"}
    (result,) = aggregate(tmp_path).results
    assert (result.metric, result.best_value) == ("mcc", max(mcc.values()))
    (table,) = build_tables(aggregate(tmp_path))
    assert (table.spec.main, table.spec.higher_is_better) == ("mcc", True)
    assert [c.key for c in table.columns][:2] == ["val_mcc", "val_accuracy"]


def test_own_jsonl_folder_generation_task(tmp_path):
    folder = tmp_path / "pairs"
    folder.mkdir()
    for split in ("train", "dev"):
        rows = [{"question": f"what is {w}", "answer": w} for w in ("red", "blue", "green", "gold")] * 4
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    raw = job_raw(tmp_path, {"path": str(folder), "prompt": "question", "target": "answer", "metric": "bleu"},
                  max_steps=2, eval_every=2)
    raw["eval"] = {"gen_max_length": 3}
    evs = train_in_process(tmp_path, raw)
    ev = next(e for e in evs if isinstance(e, Eval))
    assert {"bleu", "rougeL"} <= set(ev.metrics)
    assert evs[-1].best["metric"] == "bleu"


def test_saved_dataset_folder_with_named_splits(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = sst2_rows()
    parts = {"fit": rows[:200], "held": rows[200:]}
    datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in parts.items()}).save_to_disk(
        str(tmp_path / "saved"))
    raw = job_raw(tmp_path, {"path": "saved", "split": {"train": "fit", "validation": "held"},
                             "text": "sentence", "label": "label", "labels": ["negative", "positive"]},
                  max_steps=3)
    evs = train_in_process(tmp_path, raw)
    assert evs[0].train_examples == 200
    assert len((tmp_path / "out" / "predictions" / "step-3-validation.jsonl").read_text().splitlines()) == 64


def test_hub_id_goes_through_the_hub_code(tmp_path, monkeypatch):
    """The hub is unreachable here: its one call answers with a saved DatasetDict, recording the id."""
    datasets = pytest.importorskip("datasets")
    from lat_core.train import hub_data
    from lat_core.train.data import load_dataset
    from lat_core.config.user_data import parse_spec
    saved = tmp_path / "served"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(sst2_rows()[:40]),
                          "validation": datasets.Dataset.from_list(sst2_rows()[40:60])}).save_to_disk(str(saved))
    calls = []
    monkeypatch.setattr(hub_data, "_load_dataset",
                        lambda _d, name, config, cache: calls.append((name, config)) or datasets.load_from_disk(str(saved)))
    spec = parse_spec({"path": "someone/reviews", "config": "en", "text": "sentence", "label": "label"}, tmp_path)
    ds = load_dataset(spec, environ={})
    assert calls == [("someone/reviews", "en")] and ds.name == "reviews_en"
    assert len(ds.train) == 40 and ds.label_words == ("0", "1") and ds.metric == "accuracy"
    assert set(ds.info["hub_fingerprints"]) == {"someone/reviews/en:train", "someone/reviews/en:validation"}


@pytest.mark.slow
def test_pass_through_arg_reaches_training_arguments_and_a_callback_by_path_runs(tmp_path):
    (tmp_path / "my_callbacks.py").write_text(CALLBACK)
    write_csv(tmp_path / "reviews.csv")
    raw = job_raw(tmp_path, {"path": "reviews.csv", "text": "review", "label": "sentiment"}, max_steps=2,
                  args={"label_smoothing_factor": 0.1, "max_grad_norm": 1.0},
                  callbacks=["my_callbacks:RecordArgs"])
    proc = train_cli(tmp_path, raw, pythonpath=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads((tmp_path / "out" / "seen_by_callback.json").read_text())
    assert seen == {"label_smoothing_factor": 0.1, "max_grad_norm": 1.0}


@pytest.mark.slow
@pytest.mark.parametrize("train, needle", [
    ({"args": {"learning_rate": 0.1}}, "train.args.learning_rate: LAT sets it itself; use train.lr instead"),
    ({"args": {"label_smothing_factor": 0.1}}, "train.args.label_smothing_factor: not a field of transformers"),
    ({"callbacks": ["no_such_module_here:Cb"]}, "train.callbacks[0]: cannot import 'no_such_module_here:Cb'"),
    ({"callbacks": ["not a path"]}, "train.callbacks[0]: expected 'package.module:ClassName'"),
])
def test_what_cannot_work_is_exit_2_naming_it(tmp_path, train, needle):
    write_csv(tmp_path / "reviews.csv")
    proc = train_cli(tmp_path, job_raw(tmp_path, {"path": "reviews.csv", "text": "review", "label": "sentiment"}, **train))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert needle in proc.stderr
    if "smothing" in needle:
        assert "did you mean 'label_smoothing_factor'?" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("data, needle", [
    ({"path": "reviews.csv", "text": "review", "label": "stars"}, "data.label: the train split has no column 'stars'"),
    ({"path": "missing.csv", "text": "review", "label": "sentiment"}, "data.path: no such file or folder"),
    ({"path": "reviews.csv", "text": "review", "lable": "sentiment"}, "data.lable: unknown key (did you mean 'label'?)"),
])
def test_bad_data_is_exit_2_naming_the_key(tmp_path, data, needle):
    write_csv(tmp_path / "reviews.csv")
    proc = train_cli(tmp_path, job_raw(tmp_path, data))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert needle in proc.stderr


@pytest.mark.parametrize("stopping", [{"early_stopping": {"patience": 2}}, {"early_stopping_patience": 2}])
def test_early_stopping_ends_a_stalled_job_successfully(tmp_path, capsys, stopping):
    """A learning rate too small to move the adapter: the validation metric repeats itself, so after
    the first evaluation two more without improvement stop the job at step 6 of 40."""
    write_csv(tmp_path / "reviews.csv")
    raw = job_raw(tmp_path, {"path": "reviews.csv", "text": "review", "label": "sentiment"},
                  max_steps=40, eval_every=2, lr=1e-12, **stopping)
    evs = train_in_process(tmp_path, raw)
    finished = evs[-1]
    assert isinstance(finished, Finished) and finished.status == "ok" and finished.steps == 6
    assert finished.stopped_early == EarlyStop(step=6, max_steps=40, metric="accuracy", patience=2)
    assert [e.step for e in evs if isinstance(e, Eval)] == [2, 4, 6]
    out = capsys.readouterr().out
    assert "early stopping: validation accuracy did not improve by more than 0 in 2 evaluations" in out
    assert "stopped at step 6 of 40" in out
    # the results' Jobs section says so too (the table's row is an ordinary success)
    from lat_core.results import aggregate
    from lat_core.results.render import jobs_markdown, report_document
    report = aggregate(tmp_path)
    line = "stopped early at step 6 of 40 (no better accuracy for 2 evals)"
    assert f"| succeeded, {line} |" in jobs_markdown(report)
    (job,) = report_document(report, [])["jobs"]
    assert job["stopped_early"] == {"step": 6, "max_steps": 40, "metric": "accuracy", "patience": 2}


def test_both_spellings_of_early_stopping_must_agree(tmp_path):
    with pytest.raises(TrainConfigError, match="train.early_stopping_patience: 3 differs"):
        parse_config(job_raw(tmp_path, "tiny-sst2", early_stopping={"patience": 2}, early_stopping_patience=3),
                     environ={})


# --- through a plan: the plan's `datasets`, the engine, the headless front end ---------------------
@pytest.fixture
def own_suite(tmp_path) -> Path:
    """The shipped configs plus a suite of one tiny GLA config that stops early when it stalls."""
    import shutil
    root = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", root)
    config = job_raw(tmp_path, "tiny-sst2", max_steps=40, eval_every=2, lr=1e-12, early_stopping={"patience": 2})
    del config["output_dir"]
    (root / "experiments" / "gla" / "stalls.yaml").write_text(yaml.safe_dump(config))
    (root / "suites" / "own.yaml").write_text(yaml.safe_dump({"rounds": {1: ["gla/stalls.yaml"]}}))
    write_csv(tmp_path / "reviews.csv")
    return root


def plan_file(tmp: Path, label: str) -> Path:
    plan = {"suites": ["own"], "pairs": ["1:reviews"], "gpus": "cpu", "slots": 1, "countdown_minutes": 0,
            "output_root": str(tmp / "runs"),
            "datasets": {"reviews": {"path": "reviews.csv", "text": "review", "label": label}}}
    (tmp / "plan.yaml").write_text(yaml.safe_dump(plan))
    return tmp / "plan.yaml"


@pytest.mark.slow
def test_a_plan_dataset_trains_and_an_early_stop_succeeds(tmp_path, own_suite, capsys):
    from lat_tui.cli import main
    code = main(["--plan", str(plan_file(tmp_path, "sentiment")), "--configs", str(own_suite),
                 "--state-dir", str(tmp_path / "state")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1/1 jobs succeeded" in out
    job = tmp_path / "runs" / "reviews_seed1" / "stalls"
    assert yaml.safe_load((job / "job.yaml").read_text())["data"] == {
        "name": "reviews", "path": str(tmp_path / "reviews.csv"), "text": "review", "label": "sentiment"}
    assert "stopped at step 6 of 40" in (job / "train.log").read_text()
    from lat_core.front.client import Client
    client = Client(tmp_path / "state")
    (row,) = client.jobs(client.latest_run().id)
    ends = [t.detail for t in client.history(row.run_id, job_id=row.id) if t.new_state == "succeeded"]
    assert ends == ["exit 0; stopped early at step 6 of 40 (no better accuracy for 2 evals)"]


def test_a_plan_dataset_with_a_missing_column_is_exit_2_and_starts_nothing(tmp_path, own_suite, capsys):
    from lat_tui.cli import main
    plan = plan_file(tmp_path, "stars")
    code = main(["--plan", str(plan), "--configs", str(own_suite), "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2
    assert "field 'datasets.reviews': data.label: no column 'stars'" in err and str(plan) in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()
