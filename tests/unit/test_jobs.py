"""Plan -> jobs: order, directory layout, __repK, resolved configs with provenance, path safety."""

import json

import pytest
import yaml

from lat_core.config.suites import SuiteRegistry
from lat_core.errors import OutputPathError
from lat_core.front.jobs import expand, materialize, safe_component
from lat_core.front.plan import plan_from_mapping
from tests.unit.test_plan import configs  # noqa: F401  (fixture)


def make_plan(configs, tmp_path, **changes):
    data = {"suites": [{"name": "E4", "rounds": "all"}], "pairs": ["87:glue-tvt_cola", "13:glue-tvt_rte"],
            "gpus": "cpu", "slots": 2, "output_root": str(tmp_path / "out"), **changes}
    return plan_from_mapping(data, SuiteRegistry(configs), where="test")


def test_one_job_per_config_seed_dataset_in_plan_order(configs, tmp_path):
    jobs = expand(make_plan(configs, tmp_path), SuiteRegistry(configs))
    assert [j.key for j in jobs] == [
        "glue-tvt_cola_seed87/a", "glue-tvt_rte_seed13/a",
        "glue-tvt_cola_seed87/b", "glue-tvt_rte_seed13/b",
        "glue-tvt_cola_seed87/c", "glue-tvt_rte_seed13/c",
        "glue-tvt_cola_seed87/c__rep2", "glue-tvt_rte_seed13/c__rep2",
    ]
    assert [j.round for j in jobs] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert jobs[0].job_dir == tmp_path / "out" / "glue-tvt_cola_seed87" / "a"


def test_rounds_filter(configs, tmp_path):
    jobs = expand(make_plan(configs, tmp_path, suites=[{"name": "E4", "rounds": [2]}]), SuiteRegistry(configs))
    assert {j.stem for j in jobs} == {"c", "c__rep2"}


def test_resolved_config_layers_and_provenance(configs, tmp_path):
    plan = make_plan(configs, tmp_path, env={"HP_BATCH_SIZE": "16", "WANDB_API_KEY": "k-123"},
                     overrides={"train": {"lr": 0.5}})
    job = expand(plan, SuiteRegistry(configs), shell_env={"HP_PEFT_R": "4", "GRADIENT_CHECKPOINTING": "0"})[0]
    assert job.config["train"] == {"lr": 0.5, "batch_size": 16, "gradient_checkpointing": False}
    assert job.config["peft"] == {"r": 4}
    assert (job.config["data"], job.config["seed"], job.config["name"]) == ("glue-tvt_cola", 87, "a")
    sources = {p["field"]: p["source"] for p in job.provenance}
    assert sources["train.lr"] == "plan.overrides"
    assert sources["train.batch_size"] == "env:HP_BATCH_SIZE"
    assert sources["peft.r"] == "env:HP_PEFT_R"


def test_materialize_writes_config_command_and_masks_secrets(configs, tmp_path):
    plan = make_plan(configs, tmp_path, env={"WANDB_API_KEY": "k-123", "HP_BATCH_SIZE": "16"})
    job = expand(plan, SuiteRegistry(configs))[0]
    materialize(job)
    written = yaml.safe_load((job.job_dir / "job.yaml").read_text())
    assert written["output_dir"] == str(job.job_dir) and written["train"]["batch_size"] == 16
    command = json.loads((job.job_dir / "command.json").read_text())
    assert command["argv"][-2:] == ["--cfg", str(job.job_dir / "job.yaml")]
    assert command["env"]["WANDB_API_KEY"] == "***"
    for name in ("job.yaml", "command.json", "overrides.json"):
        assert "k-123" not in (job.job_dir / name).read_text()
    # the records read back as written, one entry a line
    provenance = json.loads((job.job_dir / "overrides.json").read_text())
    assert provenance == json.loads(json.dumps(job.provenance, default=str))
    assert len((job.job_dir / "overrides.json").read_text().splitlines()) == len(job.provenance) + 2


def test_expanded_configs_do_not_share_mutable_parts(configs, tmp_path):
    first, second = expand(make_plan(configs, tmp_path), SuiteRegistry(configs))[:2]
    first.config["train"]["lr"] = 123.0
    assert second.config["train"].get("lr") != 123.0


@pytest.mark.parametrize("name", ["../../etc", "/abs/path", "a/../../b", "..", "x\x00y"])
def test_names_cannot_escape_the_output_root(name):
    if "\x00" in name:
        with pytest.raises(OutputPathError):
            safe_component(name, "dataset")
        return
    try:
        part = safe_component(name, "dataset")
    except OutputPathError:
        return
    assert "/" not in part and part not in ("", ".", "..")


def test_dataset_directory_is_made_absolute_and_named_by_its_basename(configs, tmp_path):
    data_dir = tmp_path / "my data"
    data_dir.mkdir()
    plan = plan_from_mapping({"suites": ["E4"], "pairs": ["1:./my data"], "output_root": str(tmp_path / "o")},
                             SuiteRegistry(configs), where="t", base=tmp_path)
    job = expand(plan, SuiteRegistry(configs))[0]
    assert job.config["data"] == str(data_dir)
    assert job.key.startswith("my_data_seed1/")


def test_hp_data_that_contradicts_a_pair_is_an_error_naming_both(configs, tmp_path):
    from lat_core.errors import ConfigError

    plan = make_plan(configs, tmp_path, env={"HP_DATA": "glue-tvt_cola"})
    with pytest.raises(ConfigError, match=r"plan env: HP_DATA=glue-tvt_cola would replace the dataset "
                                          r"of pair 13:glue-tvt_rte; name the dataset in the pairs instead"):
        expand(plan, SuiteRegistry(configs))
    with pytest.raises(ConfigError, match="launching shell: HP_DATA=glue-tvt_rte"):
        expand(make_plan(configs, tmp_path), SuiteRegistry(configs), shell_env={"HP_DATA": "glue-tvt_rte"})
    one = make_plan(configs, tmp_path, pairs=["87:glue-tvt_cola"], env={"HP_DATA": "glue-tvt_cola"})
    assert {j.dataset for j in expand(one, SuiteRegistry(configs))} == {"glue-tvt_cola"}  # agrees: fine
