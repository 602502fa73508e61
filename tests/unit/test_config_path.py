"""One configuration path: the job schema, every override source resolved once into job.yaml, and
the trainer training what job.yaml says."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.config.env import ENV_FIELDS, parse_env_value
from lat_core.config.job import TrainConfigError, load_config, parse_config, resolve_max_steps
from lat_core.config.suites import SuiteRegistry
from lat_core.errors import ConfigError, PlanError
from lat_core.front.jobs import expand, materialize
from lat_core.front.plan import plan_from_mapping
from tests.unit.test_plan import configs  # noqa: F401  (fixture)
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"


def gla_raw(tmp_path, **train) -> dict:
    raw = yaml.safe_load(GLA.read_text())
    raw["train"].update(train)
    return {**raw, "output_dir": str(tmp_path)}


def make_plan(configs, tmp_path, **changes):
    data = {"suites": [{"name": "E4", "rounds": [1]}], "pairs": ["87:glue-tvt_cola"], "gpus": "cpu",
            "output_root": str(tmp_path / "out"), **changes}
    return plan_from_mapping(data, SuiteRegistry(configs), where="plan.yaml")


# ---------------------------------------------------------------- the schema


@pytest.mark.parametrize("section, key, value, expected", [
    ("train", "batch_size", 0, "train.batch_size: expected a positive integer, got 0"),
    ("train", "batch_size", "8", "train.batch_size: expected a positive integer, got '8'"),
    ("train", "batch_size", True, "train.batch_size: expected a positive integer, got True"),
    ("train", "epochs", float("inf"), "train.epochs: expected a finite number > 0, got inf"),
    ("train", "lr", float("nan"), "train.lr: expected a finite number > 0, got nan"),
    ("train", "warmup_ratio", 1.0, "train.warmup_ratio: expected a number in [0, 1), got 1.0"),
    ("train", "lr_scheduler", "poly", "train.lr_scheduler: expected one of constant, linear"),
    ("peft", "dropout", 1.5, "peft.dropout: expected a number in [0, 1), got 1.5"),
    ("peft", "init_lora_weights", "bogus", "peft.init_lora_weights: expected true, false, gaussian"),
    ("peft", "target_modules", [], "peft.target_modules: expected a non-empty list of strings"),
    ("model", "dtype", "fp8", "model.dtype: expected bf16, fp16 or fp32"),
    ("train", "bogus", 1, "unknown key 'train.bogus' (allowed: batch_size, lr,"),
])
def test_schema_errors_name_the_field_and_the_expectation(tmp_path, section, key, value, expected):
    raw = gla_raw(tmp_path)
    raw[section] = {**raw.get(section, {}), key: value}
    with pytest.raises(TrainConfigError) as info:
        parse_config(raw, environ={})
    assert str(info.value).startswith(expected)
    assert info.value.field == f"{section}.{key}"


def test_cross_field_and_top_level_errors(tmp_path):
    with pytest.raises(TrainConfigError, match="sdlora tunes Mamba SSM channels") as info:
        parse_config({**gla_raw(tmp_path), "peft": {"method": "sdlora"}}, environ={})
    assert info.value.field == "peft.method"
    with pytest.raises(TrainConfigError, match="unknown key 'sources'"):
        parse_config({**gla_raw(tmp_path), "sources": {}}, environ={})
    with pytest.raises(TrainConfigError, match="model: expected a mapping, got 'x'"):
        parse_config({**gla_raw(tmp_path), "model": "x"}, environ={})


@pytest.mark.parametrize("var, text, field, value", [
    ("HP_PEFT_DROPOUT", "1.5", "peft.dropout", 1.5),
    ("HP_EPOCHS", "inf", "train.epochs", float("inf")),
    ("HP_BATCH_SIZE", "0", "train.batch_size", 0),
    ("HP_INIT", "bogus", "peft.init_lora_weights", "bogus"),
    ("LR_WARMUP_RATIO", "1", "train.warmup_ratio", 1),
])
def test_env_and_file_refuse_a_value_with_one_check(tmp_path, var, text, field, value):
    """The env table and the schema share each field's check: same value, same expectation."""
    assert ENV_FIELDS[var].field == field
    with pytest.raises(ValueError) as from_env:
        parse_env_value(var, text)
    section, key = field.split(".")
    raw = gla_raw(tmp_path)
    raw[section] = {**raw[section], key: value}
    with pytest.raises(TrainConfigError) as from_file:
        parse_config(raw, environ={})
    assert str(from_env.value).startswith(f"{var}={text!r}: expected ")
    assert str(from_env.value).split(": ", 1)[1] in str(from_file.value)


def test_resolved_marker_turns_the_environment_off(tmp_path):
    env = {"HP_BATCH_SIZE": "8", "GRADIENT_CHECKPOINTING": "1", "NUM_DATA_WORKERS": "2", "USE_WANDB": "1"}
    raw = gla_raw(tmp_path, batch_size=4, grad_accum=2)
    by_hand = parse_config(raw, environ=env)
    assert (by_hand.train.batch_size, by_hand.train.gradient_checkpointing, by_hand.train.num_workers) == (8, True, 2)
    assert by_hand.train.report_to == ["wandb"] and by_hand.sources["train.batch_size"] == "env:HP_BATCH_SIZE"
    engine = parse_config({**raw, "resolved": True}, environ=env)
    assert (engine.train.batch_size, engine.train.grad_accum) == (4, 2)
    assert (engine.train.gradient_checkpointing, engine.train.num_workers, engine.train.report_to) == (False, 0, [])
    assert engine.sources == {}


# ---------------------------------------------------------------- resolution in lat_core.front.jobs


def test_each_source_of_a_bad_value_is_named(configs, tmp_path):
    (configs / "experiments" / "gla" / "a.yaml").write_text("train: {batch_size: 0}\n")
    with pytest.raises(ConfigError, match=r"gla/a\.yaml: train\.batch_size: expected a positive integer, got 0"):
        expand(make_plan(configs, tmp_path), SuiteRegistry(configs))
    (configs / "experiments" / "gla" / "a.yaml").write_text("train: {lr: 0.001}\n")
    with pytest.raises(ConfigError, match=r"^plan overrides: peft\.dropout: expected a number in \[0, 1\), got 1\.5"):
        expand(make_plan(configs, tmp_path, overrides={"peft": {"dropout": 1.5}}), SuiteRegistry(configs))
    with pytest.raises(PlanError, match=r"field 'env\.HP_EPOCHS': HP_EPOCHS='inf': expected a finite number > 0"):
        make_plan(configs, tmp_path, env={"HP_EPOCHS": "inf"})
    with pytest.raises(ConfigError) as info:
        expand(make_plan(configs, tmp_path), SuiteRegistry(configs), shell_env={"HP_BATCH_SIZE": "abc"})
    assert str(info.value) == "HP_BATCH_SIZE='abc' from the launching shell: expected a positive integer"
    (configs / "experiments" / "gla" / "a.yaml").write_text("peft: {method: sdlora}\n")
    with pytest.raises(ConfigError, match=r"gla/a\.yaml: peft\.method: sdlora tunes Mamba"):
        expand(make_plan(configs, tmp_path), SuiteRegistry(configs))
    with pytest.raises(ConfigError, match=r"^plan overrides: peft\.method: sdlora"):
        expand(make_plan(configs, tmp_path, overrides={"model": {"family": "gla"}, "peft": {"method": "sdlora"}}),
               SuiteRegistry(configs))


def test_later_layers_win_and_provenance_says_where(configs, tmp_path):
    plan = make_plan(configs, tmp_path, overrides={"train": {"batch_size": 2, "lr": 0.5}},
                     env={"HP_BATCH_SIZE": "16", "HP_PEFT_R": "2", "USE_WANDB": "1"})
    job = expand(plan, SuiteRegistry(configs), shell_env={"HP_PEFT_R": "4", "GLA_VERBOSE": "1"})[0]
    assert job.config["resolved"] is True
    assert (job.typed.train.batch_size, job.typed.train.lr, job.typed.peft.r) == (16, 0.5, 4)
    assert job.typed.train.report_to == ["wandb"] and job.typed.gla.verbose is True
    froms = {p["field"]: p.get("from") for p in job.provenance}
    assert froms["train.batch_size"] == "plan env" and froms["peft.r"] == "the launching shell"


def test_epochs_from_a_later_layer_outrank_the_files_max_steps(configs, tmp_path):
    (configs / "experiments" / "gla" / "a.yaml").write_text("train: {max_steps: 40}\n")
    job = expand(make_plan(configs, tmp_path, env={"HP_EPOCHS": "2"}), SuiteRegistry(configs))[0]
    assert "max_steps" not in job.config["train"] and job.config["train"]["epochs"] == 2.0
    assert resolve_max_steps(job.typed, 200) == (50, "epochs 2 x 200 examples / effective batch 8 = 50 steps")
    same_layer = expand(make_plan(configs, tmp_path, env={"HP_EPOCHS": "2", "HP_MAX_STEPS": "7"}),
                        SuiteRegistry(configs))[0]
    assert resolve_max_steps(same_layer.typed, 200)[0] == 7


def test_round_trip_resolve_job_yaml_trainer_parse(configs, tmp_path, monkeypatch):
    plan = make_plan(configs, tmp_path, overrides={"train": {"grad_accum": 2}},
                     env={"HP_BATCH_SIZE": "4", "LOGITS_TO_KEEP": "all", "REPORT_TO": "tensorboard"})
    job = expand(plan, SuiteRegistry(configs), shell_env={"HP_PREC": "bf16", "LR_SCHEDULER_TYPE": "Cosine"})[0]
    materialize(job)
    monkeypatch.setenv("HP_BATCH_SIZE", "64")   # the job's env still holds the variables: ignored
    parsed = load_config(job.job_dir / "job.yaml")
    assert parsed.model_dump() == job.typed.model_dump()
    assert parsed.explicit == job.typed.explicit and parsed.cfg_path == job.job_dir / "job.yaml"
    assert (parsed.train.batch_size, parsed.train.grad_accum, parsed.model.dtype) == (4, 2, "bfloat16")
    assert (parsed.train.logits_to_keep, parsed.train.lr_scheduler, parsed.train.report_to) == (0, "cosine",
                                                                                                 ["tensorboard"])


# ---------------------------------------------------------------- the front end: exit 2, nothing made


@pytest.mark.parametrize("var, value, expected", [
    ("HP_BATCH_SIZE", "abc", "expected a positive integer"),
    ("HP_EPOCHS", "inf", "expected a finite number > 0"),
    ("HP_PEFT_DROPOUT", "1.5", "expected a number in [0, 1)"),
    ("HP_INIT", "bogus", "expected true, false, gaussian"),
])
def test_cli_refuses_a_bad_shell_value_before_anything_starts(tmp_path, var, value, expected):
    env = {**os.environ, "PYTHONPATH": str(ROOT), var: value, "LAT_STATE_DIR": str(tmp_path / "state")}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "lat_tui.cli", "--suite", "demo", "--pairs", "1:tiny-sst2",
                           "--gpus", "cpu", "--output-root", str(out)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 2, proc.stderr
    assert f"{var}={value!r} from the launching shell: {expected}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not (tmp_path / "state").exists()


def test_env_flag_adds_to_the_plan_files_env_and_wins(configs, tmp_path):
    from lat_tui.cli import build_parser, plan_from_args

    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump({"suites": ["E4"], "pairs": ["1:tiny-sst2"],
                                         "env": {"HP_LR": "0.1", "HP_SEED": "3"}}))
    args = build_parser().parse_args(["--plan", str(plan_file), "--configs", str(configs), "--env", "HP_SEED=5"])
    assert plan_from_args(args).env == {"HP_LR": "0.1", "HP_SEED": "5"}
