"""train.graphs / train.pack: typed in the job schema, carried from a plan (overrides or env) into
job.yaml and read back by the trainer's parser unchanged."""

import pytest
import yaml

from lat_core.config.job import TrainConfigError, load_config, parse_config
from lat_core.config.suites import SuiteRegistry
from lat_core.front.jobs import expand, materialize
from tests.unit.test_jobs import make_plan
from tests.unit.test_plan import configs  # noqa: F401  (fixture)


def _job_yaml(configs, tmp_path, **changes):
    job = expand(make_plan(configs, tmp_path, **changes), SuiteRegistry(configs))[0]
    materialize(job)
    path = job.job_dir / "job.yaml"
    return yaml.safe_load(path.read_text()), load_config(path)


def test_defaults_are_auto(tmp_path):
    cfg = parse_config({"data": "tiny-sst2", "output_dir": str(tmp_path)}, environ={})
    assert (cfg.train.graphs, cfg.train.pack) == ("auto", "auto")


def test_plan_overrides_reach_the_trainer(configs, tmp_path):
    raw, cfg = _job_yaml(configs, tmp_path, overrides={"train": {"graphs": False, "pack": "auto"}})
    assert raw["train"]["graphs"] is False and raw["train"]["pack"] == "auto"
    assert (cfg.train.graphs, cfg.train.pack) == (False, "auto")


def test_plan_env_reaches_the_trainer(configs, tmp_path):
    raw, cfg = _job_yaml(configs, tmp_path, env={"LAT_JOB_GRAPHS": "false", "LAT_JOB_PACK": "off"})
    assert raw["train"]["graphs"] is False and raw["train"]["pack"] is False
    assert (cfg.train.graphs, cfg.train.pack) == (False, False)


@pytest.mark.parametrize("field, value, expected", [("graphs", True, "auto or false"), ("graphs", "yes please", "auto or false"),
                                                     ("graphs", 1, "auto or false"), ("pack", "sometimes", "auto, true or false")])
def test_bad_value_names_the_field(tmp_path, field, value, expected):
    with pytest.raises(TrainConfigError) as err:
        parse_config({"data": "tiny-sst2", "output_dir": str(tmp_path), "train": {field: value}}, environ={})
    assert err.value.field == f"train.{field}" and expected in str(err.value)


def test_pack_true(tmp_path):
    cfg = parse_config({"data": "tiny-sst2", "output_dir": str(tmp_path), "train": {"pack": True}}, environ={})
    assert cfg.train.pack is True
