"""Tracker run names, groups and tags (lat_core/train/tracking.py), with no tracker installed: the
names are a pure function, and what the trackers read is the Trainer's run_name plus their own
environment variables, checked here as Trackers leaves them."""
from pathlib import Path

import pytest
import yaml

from lat_core.config.job import parse_config
from lat_core.train import tracking
from lat_core.train.tracking import SUITE_VAR, Trackers, run_naming

ROOT = Path(__file__).resolve().parents[3]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"


def test_one_run_per_config_seed_and_dataset_grouped_by_config():
    n = run_naming("E1_QKVO_r8", 87, "glue-tvt_cola", "gla_adapters")
    assert n.name == "E1_QKVO_r8@87:glue-tvt_cola" and n.group == "E1_QKVO_r8"
    assert n.tags == ("suite:gla_adapters", "dataset:glue-tvt_cola", "seed:87")
    assert n.folder() == "E1_QKVO_r8@87_glue-tvt_cola"
    other = run_naming("E1_QKVO_r8", 88, "samsum", "gla_adapters")
    assert other.name != n.name and other.group == n.group
    repeat = run_naming("E1_QKVO_r8__rep2", 87, "glue-tvt_cola", "gla_adapters")
    assert repeat.name == "E1_QKVO_r8__rep2@87:glue-tvt_cola" and repeat.group == "E1_QKVO_r8"
    by_hand = run_naming("mine", 1, "/data/my set/", "")
    assert by_hand.name == "mine@1:my set" and by_hand.tags == ("dataset:my set", "seed:1")
    assert by_hand.folder() == "mine@1_my_set"


def _cfg(tmp_path, report_to, **top):
    raw = yaml.safe_load(GLA.read_text())
    raw["train"]["report_to"] = report_to
    raw.update(output_dir=str(tmp_path), name="E1", seed=87, data="glue-tvt_rte", **top)
    return parse_config(raw, environ={})


@pytest.fixture
def installed(monkeypatch):
    """wandb and swanlab count as installed (they are not, here); the names do not need them."""
    monkeypatch.setattr(tracking, "_require", lambda module, why: None)


def test_wandb_and_swanlab_get_name_group_and_tags(tmp_path, installed):
    env = {SUITE_VAR: "gla_adapters"}
    t = Trackers(_cfg(tmp_path, ["wandb", "swanlab"]), print, environ=env)
    assert t.active == ["wandb", "swanlab"] and t.run_name == "E1@87:glue-tvt_rte"
    tags = "suite:gla_adapters,dataset:glue-tvt_rte,seed:87"
    assert env["WANDB_RUN_GROUP"] == env["SWANLAB_GROUP"] == "E1"
    assert env["WANDB_TAGS"] == env["SWANLAB_TAGS"] == tags


def test_the_users_own_names_win(tmp_path, installed):
    env = {"WANDB_RUN_GROUP": "mine", "WANDB_NAME": "seed-name"}
    t = Trackers(_cfg(tmp_path, ["wandb"]), print, environ=env)
    assert t.run_name == "seed-name" and env["WANDB_RUN_GROUP"] == "mine"
    assert env["WANDB_TAGS"] == "dataset:glue-tvt_rte,seed:87"   # no suite outside the engine
    prefixed = Trackers(_cfg(tmp_path, ["swanlab"]), print, environ={"SWANLAB_EXPERIMENT_PREFIX": "r3-"})
    assert prefixed.run_name == "r3-E1@87:glue-tvt_rte"
    named = Trackers(_cfg(tmp_path, ["swanlab"]), print, environ={"SWANLAB_EXPERIMENT_NAME": "x"})
    assert named.run_name == "x"


def test_tensorboard_logs_each_run_in_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking.importlib, "import_module", lambda name: None)
    env: dict = {}
    Trackers(_cfg(tmp_path, ["tensorboard"]), print, environ=env)
    assert env["TENSORBOARD_LOGGING_DIR"] == str(tmp_path / "tensorboard" / "E1@87_glue-tvt_rte")


def test_wandb_offline_run_gets_the_name_group_and_tags(tmp_path, monkeypatch):
    """The real wandb (when installed), offline: the call transformers' WandbCallback makes."""
    import os
    wandb = pytest.importorskip("wandb")
    for key in ("WANDB_PROJECT", "WANDB_DIR", "WANDB_RUN_GROUP", "WANDB_TAGS", "WANDB_NAME"):
        monkeypatch.delenv(key, raising=False)   # restored (removed) after the test
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv(SUITE_VAR, "gla_adapters")
    t = Trackers(_cfg(tmp_path, ["wandb"]), print)
    run = wandb.init(project=os.environ["WANDB_PROJECT"], name=t.run_name)
    try:
        assert (run.name, run.group) == ("E1@87:glue-tvt_rte", "E1")
        assert set(run.tags) == {"suite:gla_adapters", "dataset:glue-tvt_rte", "seed:87"}
        assert Path(run.dir).is_relative_to(tmp_path)
    finally:
        run.finish()
