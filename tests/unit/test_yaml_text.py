"""job.yaml's fast writer reads back exactly as written, for the shipped configs and tricky values."""

import math
from pathlib import Path

import pytest
import yaml

from lat_core.config.yaml_text import dump

ROOT = Path(__file__).resolve().parents[2]
TRICKY = {
    "name": "yes", "on": "off", "null": None, "y": "n", "1": 1, 2: "two", "true": True, "False": False,
    "lr": 2e-05, "tiny": 1e-20, "big": 1.5e300, "neg": -0.0, "third": 1 / 3, "whole": 3.0,
    "strings": ["", "a: b", "#x", "- y", "'q'", '"dq"', "multi\nline", "tab\there", "ünïcödé ✓", "\x07bell", "~"],
    "nested": {"deep": {"empty": {}, "list": [], "mixed": [1, 2.5, None, True, "s", {"k": [1e-7]}]}},
    "path": "/tmp/out dir/x.yaml", "version": "1.10", "octal": "0o17", "date": "2026-11-23",
}


def test_tricky_values_round_trip():
    back = yaml.safe_load(dump(TRICKY))
    assert back == TRICKY
    assert math.copysign(1, back["neg"]) == -1.0


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_infinities_round_trip(value):
    assert yaml.safe_load(dump({"x": value})) == {"x": value}


def test_nan_round_trips():
    assert math.isnan(yaml.safe_load(dump({"x": float("nan")}))["x"])


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "experiments").rglob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_experiment_config_round_trips(path):
    config = yaml.safe_load(path.read_text())
    assert yaml.safe_load(dump(config)) == config


def test_nested_mappings_are_block_style_for_people():
    text = dump({"model": {"family": "gla", "tiny": {"hidden_size": 64}}, "seed": 1})
    assert text == 'model:\n  family: "gla"\n  tiny:\n    hidden_size: 64\nseed: 1\n'


def test_a_value_no_config_holds_is_refused():
    with pytest.raises(TypeError, match="set"):
        dump({"x": {1, 2}})
