"""A run's saved plan read back as SavedPlan: every field of the plan schema comes back as saved, a
field left out reads the one table of defaults, and a damaged field is named, never guessed."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
import yaml

from lat_core.contract.plan_defaults import PLAN_DEFAULTS, PlanDefaults
from lat_core.contract.saved_plan import BREAKER_IF_UNSAVED, FUSE_IF_UNSAVED, OnFailure, OnOom, SavedPlan, SavedSuite
from lat_core.front.plan import Plan

NOT_PLAN_FIELDS = {"text", "problem"}
# every field away from its default (resume and overwrite exclude each other only in a loaded plan)
FULL = {
    "suites": [{"name": "E4", "rounds": [1, 2]}, "E5"], "pairs": ["1:glue-tvt_cola", "2:tiny-sst2"],
    "gpus": [0, 2], "slots": [2, 3], "countdown_minutes": 5, "env": {"NUM_DATA_WORKERS": "0", "WANDB_API_KEY": "s3"},
    "output_root": "/data/runs", "overrides": {"train": {"lr": 0.001}},
    "datasets": {"reviews": {"name": "reviews", "path": "/data/reviews.csv", "text": "review", "label": "stars"}},
    "sweep": {"grid": {"train.lr": [0.0001, 0.0002]}, "random": {"n": 2, "seed": 1, "space": {"peft.r": [4, 8]}}}, "after": [3, 5],
    "notify": {"webhook": {"url": "https://hooks.example/T0/token", "headers": {"X-Api-Key": "k"}}, "on": ["failure"]},
    "gpus_per_job": 2, "min_free_gb": 3.5, "backend": "slurm",
    "slurm": {"partition": "gpu", "time": "60", "extra_args": ["--qos=high"]},
    "on_oom": {"remedies": ["fewer_slots", "expandable_segments"], "max_retries": 3},
    "on_failure": {"classes": ["nccl"], "max_retries": 4, "backoff_s": 5},
    "resume": True, "overwrite": True, "mps": True, "fuse": True, "warm_start": False, "allow_cpu": True, "breaker": 5,
    "configs": "/home/me/my-configs",
}


def thawed(value: object) -> object:
    """A saved plan's value as plain YAML data (mappings, lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return thawed({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


def read_back(saved: SavedPlan) -> dict:
    return {name: thawed(getattr(saved, name)) for name in Plan.model_fields}


def as_saved(plan: Plan) -> dict:
    """Every field of the plan as it was saved: what to_yaml wrote (secrets masked), else its value."""
    written, data = yaml.safe_load(plan.to_yaml()), plan.model_dump(mode="json")
    return {name: written.get(name, data[name]) for name in Plan.model_fields}


def test_a_saved_plan_has_every_field_of_the_schema():
    assert {f.name for f in dataclasses.fields(SavedPlan)} - NOT_PLAN_FIELDS == set(Plan.model_fields)


def test_every_field_reads_back_as_saved_with_secrets_masked():
    plan = Plan.model_validate(FULL)
    at_default = [n for n, f in Plan.model_fields.items() if getattr(plan, n) == f.get_default(call_default_factory=True)]
    assert at_default == []  # the test covers every field
    saved = SavedPlan.from_text(plan.to_yaml())
    assert saved.problem is None and read_back(saved) == as_saved(plan)
    assert saved.suites == (SavedSuite("E4", (1, 2)), SavedSuite("E5"))
    assert saved.on_oom == OnOom(("fewer_slots", "expandable_segments"), 3)
    assert saved.on_failure == OnFailure(("nccl",), 4, 5.0)
    assert saved.env == {"NUM_DATA_WORKERS": "0", "WANDB_API_KEY": "***"}
    assert saved.notify["webhook"]["url"] == "https://hooks.example/***" and saved.notify["webhook"]["headers"] == {
        "X-Api-Key": "***"}


def test_fields_left_out_read_back_as_the_schema_made_them():
    plan = Plan.model_validate({"suites": ["E4"], "pairs": ["1:glue-tvt_cola"]})
    saved = SavedPlan.from_text(plan.to_yaml())
    assert read_back(saved) == as_saved(plan)
    assert (saved.backend, saved.gpus_per_job, saved.warm_start, saved.fuse, saved.breaker) == ("local", 1, True, "auto", 3)


def test_an_empty_saved_plan_is_the_table_of_defaults_but_fuse_and_breaker():
    for text in ("", "{}", "some_newer_field: 1\n"):
        saved = SavedPlan.from_text(text)
        assert saved.problem is None
        for name in (f.name for f in dataclasses.fields(PlanDefaults)):
            expected = {"fuse": FUSE_IF_UNSAVED, "breaker": BREAKER_IF_UNSAVED}.get(name, getattr(PLAN_DEFAULTS, name))
            if hasattr(saved, name):
                assert getattr(saved, name) == expected, name
        assert (saved.on_oom, saved.on_failure, saved.env, saved.suites) == (None, None, {}, ())


def test_the_plan_schema_takes_its_defaults_from_the_table():
    for name in Plan.model_fields.keys() & {f.name for f in dataclasses.fields(PlanDefaults)}:
        assert Plan.model_fields[name].default == getattr(PLAN_DEFAULTS, name), name
    assert OnOom(("x",)).max_retries == PLAN_DEFAULTS.max_retries
    assert OnFailure(("nccl",)).backoff_s == PLAN_DEFAULTS.backoff_s


@pytest.mark.parametrize("name, bad", [
    ("suites", "E4"), ("suites", [{"rounds": "all"}]), ("suites", [{"name": "E4", "rounds": ["x"]}]),
    ("pairs", [[1, 2]]), ("gpus", "two"), ("gpus", [0, "1"]), ("slots", [1, "x"]), ("countdown_minutes", "soon"),
    ("env", ["A=1"]), ("env", {"A": {"b": 1}}), ("output_root", 3), ("overrides", "x"), ("sweep", [1]), ("after", "3"), ("notify", ["mail"]),
    ("gpus_per_job", True), ("min_free_gb", "lots"), ("backend", "k8s"), ("slurm", "gpu"),
    ("on_oom", {"remedies": ["fewer_slots"], "max_retries": "two"}), ("on_failure", [1]),
    ("on_failure", {"classes": ["nccl"], "backoff_s": "1m"}), ("resume", "yes"), ("overwrite", 1), ("mps", "on"),
    ("fuse", "sometimes"), ("warm_start", 1), ("allow_cpu", "yes"), ("breaker", 2.5),
])
def test_a_damaged_field_is_named_and_reads_as_its_default(name, bad):
    good = {"output_root": "/data/runs", "min_free_gb": 1.5}
    saved = SavedPlan.from_text(yaml.safe_dump({**good, name: bad}))
    assert saved.problem is not None and saved.problem.startswith(f"field {name!r}: expected"), saved.problem
    assert getattr(saved, name) == getattr(SavedPlan(), name)
    assert all(getattr(saved, k) == v for k, v in good.items() if k != name)  # the other fields still read


@pytest.mark.parametrize("text, says", [
    ("suites: [\n", "not YAML (ParserError"), ("'2001-13-45': !!timestamp 2001-13-45\n", "not YAML (ValueError"),
])
def test_a_saved_plan_that_is_not_yaml_is_damaged(text, says):
    saved = SavedPlan.from_text(text)
    assert saved.problem is not None and saved.problem.startswith(says) and saved.text == text


def test_a_saved_plan_that_holds_no_mapping_has_no_fields():
    for text in ("p", "- a\n- b\n", "~\n"):
        assert SavedPlan.from_text(text) == SavedPlan(text)


def test_a_saved_plan_is_shared_and_nobody_can_change_it():
    text = Plan.model_validate(FULL).to_yaml()
    saved = SavedPlan.from_text(text)
    assert SavedPlan.from_text(text) is saved  # read once for every row of the run
    with pytest.raises(TypeError):
        saved.env["NUM_DATA_WORKERS"] = "4"  # type: ignore[index]
    with pytest.raises(TypeError):
        saved.notify["webhook"]["url"] = "https://elsewhere"
    with pytest.raises(dataclasses.FrozenInstanceError):
        saved.backend = "local"  # type: ignore[misc]
    assert isinstance(saved.slurm["extra_args"], tuple)


def test_its_mapping_is_a_fresh_copy_to_validate_again():
    saved = SavedPlan.from_text(Plan.model_validate(FULL).to_yaml())
    mapping = saved.mapping()
    mapping["suites"] = [{"name": "other"}]
    assert saved.mapping()["suites"][0]["name"] == "E4" and saved.suites[0].name == "E4"
    assert Plan.model_validate(saved.mapping()).pairs == Plan.model_validate(FULL).pairs
    assert SavedPlan.from_text("- a\n").mapping() == {}  # (its text holds no mapping of fields)
