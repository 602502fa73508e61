"""A user's config tree sits beside the shipped one: its names first, the rest still shipped."""

import json
from pathlib import Path

import pytest
import yaml

from lat_core.config.paths import SHIPPED, USER, config_trees, find_plan, shipped_configs
from lat_core.config.suites import SuiteRegistry
from lat_core.errors import ConfigError
from lat_core.front.jobs import expand
from lat_core.front.plan import plan_from_mapping
from lat_core.config.job import parse_config
from lat_core.config.peft_specs import load_peft_spec
from lat_tui.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def user_tree(tmp_path, monkeypatch) -> Path:
    """The README's example: suite E4 of one own config (with an own PEFT spec) and one shipped config."""
    monkeypatch.delenv("LAT_CONFIGS", raising=False)
    root = tmp_path / "my-configs"
    own = yaml.safe_load((ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml").read_text())
    own["peft"] = {"spec": "my_qkvo_r2"}
    _write(root / "experiments/gla/my_lora.yaml", own)
    _write(root / "peft/my_qkvo_r2.yaml", {"method": "lora", "r": 2, "alpha": 4, "target_modules": "QKVO"})
    _write(root / "suites/E4.yaml", {"description": "own and shipped",
                                     "rounds": {1: ["gla/my_lora.yaml", "mamba/tiny_lora.yaml"]}})
    return root


def test_checkout_ships_its_configs_tree():
    assert shipped_configs() == ROOT / "configs"
    assert config_trees() == config_trees(None)
    assert [t.origin for t in config_trees()] == [SHIPPED]


def test_user_suite_beside_shipped_ones(user_tree):
    registry = SuiteRegistry(config_trees(user_tree))
    origins = {e.name: e.origin for e in registry.entries()}
    assert origins["E4"] == USER and origins["demo"] == SHIPPED
    own, shipped = registry.get("E4").rounds[1]
    assert own == user_tree / "experiments/gla/my_lora.yaml"
    assert shipped == ROOT / "configs/experiments/mamba/tiny_lora.yaml"


def test_user_names_are_looked_up_first(user_tree):
    _write(user_tree / "suites/demo.yaml", {"rounds": {1: ["gla/tiny_lora_qkvo.yaml"]}})
    own_gla = _write(user_tree / "experiments/gla/tiny_lora_qkvo.yaml",
                     yaml.safe_load((ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml").read_text()))
    registry = SuiteRegistry(config_trees(user_tree))
    demo = next(e for e in registry.entries() if e.name == "demo")
    assert demo.origin == USER and demo.shadows == (ROOT / "configs/suites/demo.yaml",)
    assert registry.get("demo").rounds[1] == (own_gla,)


def test_env_var_names_the_user_tree(user_tree, monkeypatch):
    monkeypatch.setenv("LAT_CONFIGS", str(user_tree))
    assert [(t.origin, t.path) for t in config_trees()] == [(USER, user_tree), (SHIPPED, ROOT / "configs")]


@pytest.mark.parametrize("via", ["--configs", "LAT_CONFIGS"])
def test_missing_user_tree_is_an_error_naming_its_source(tmp_path, monkeypatch, via):
    missing = tmp_path / "nope"
    monkeypatch.setenv("LAT_CONFIGS", str(missing))
    with pytest.raises(ConfigError) as info:
        config_trees(missing if via == "--configs" else None)
    assert info.value.where == via and str(missing) in str(info.value)


def test_unknown_suite_lists_both_trees(user_tree):
    with pytest.raises(Exception) as info:
        SuiteRegistry(config_trees(user_tree)).get("E9")
    assert "E4" in str(info.value) and "demo" in str(info.value) and str(user_tree / "suites") in str(info.value)


def test_user_peft_spec_is_pinned_into_the_job_and_loads(user_tree, tmp_path):
    registry = SuiteRegistry(config_trees(user_tree))
    plan = plan_from_mapping({"suites": ["E4"], "pairs": ["1:tiny-sst2"], "output_root": str(tmp_path / "o")},
                             registry, where="t")
    own = next(job for job in expand(plan, registry) if job.stem == "my_lora")
    assert own.config["peft"]["spec"] == str(user_tree / "peft/my_qkvo_r2.yaml")
    assert load_peft_spec(own.config["peft"]["spec"])["r"] == 2
    cfg = parse_config({**own.config, "output_dir": str(tmp_path / "job")}, environ={})
    assert cfg.peft.r == 2


def test_shipped_peft_spec_names_stay_names(tmp_path):
    registry = SuiteRegistry(config_trees())
    config = {"peft": {"spec": "lora_qkvo_r8"}}
    assert registry.pin_user_peft_spec(config) is config


def test_plan_by_name_finds_shipped_plans_and_paths_stay_paths(user_tree, tmp_path):
    trees = config_trees(user_tree)
    assert find_plan("demo", trees) == ROOT / "configs/plans/demo.yaml"
    _write(user_tree / "plans/demo.yaml", {"suites": ["E4"]})
    assert find_plan("demo", trees) == user_tree / "plans/demo.yaml"
    assert find_plan("configs/plans/demo.yaml", trees) == Path("configs/plans/demo.yaml")


def test_suites_verb_lists_names_and_origins(user_tree, capsys):
    assert main(["suites", "--configs", str(user_tree), "--json"]) == 0
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["E4"]["origin"] == USER and rows["E4"]["configs"] == 2 and rows["E4"]["error"] is None
    assert rows["demo"]["origin"] == SHIPPED and rows["demo"]["path"] == str(ROOT / "configs/suites/demo.yaml")


def test_suites_verb_shows_a_broken_suite_with_its_error(user_tree, capsys):
    _write(user_tree / "suites/broken.yaml", {"rounds": {1: ["gla/nowhere.yaml"]}})
    assert main(["suites", "--configs", str(user_tree)]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("broken"))
    assert "user" in line and "nowhere.yaml" in line and "not found" in line


def test_suites_verb_with_a_missing_tree_exits_2(tmp_path, capsys):
    assert main(["suites", "--configs", str(tmp_path / "nope")]) == 2
    assert "--configs" in capsys.readouterr().err
