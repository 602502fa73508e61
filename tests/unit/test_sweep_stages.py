"""``sweep: {stages: {screen: ..., promote: k}}``: stage 1 is one screening job per point and dataset
(the dataset's first seed, the screen fields over its config, its own folder), stage 2 one job per
point and pair, each with its role in the journal; a bad stages mapping is a plan problem naming
its field."""

import json

import pytest

from lat_core.config.suites import SuiteRegistry
from lat_core.contract.journal import Store
from lat_core.contract.sweep_roles import Stage, SweepRole
from lat_core.errors import ConfigError, PlanError
from lat_core.front.jobs import expand, materialize
from lat_core.front.service import job_record
from tests.unit.test_jobs import make_plan
from tests.unit.test_plan import configs  # noqa: F401  (fixture)

STAGES = {"grid": {"train.lr": [1.0e-4, 2.0e-4, 5.0e-4]},
          "stages": {"screen": {"train.data_fraction": 0.25, "HP_MAX_STEPS": 10}, "promote": 2}}
PAIRS = ["1:glue-tvt_cola", "2:glue-tvt_cola", "3:glue-tvt_rte"]


def test_stage_1_screens_each_point_once_per_dataset_and_stage_2_runs_every_pair(configs, tmp_path):
    jobs = expand(make_plan(configs, tmp_path, suites=[{"name": "demo"}], pairs=PAIRS, sweep=STAGES),
                  SuiteRegistry(configs))
    screen = [j for j in jobs if j.sweep.stage is Stage.SCREEN]
    assert [j.key for j in screen] == [
        "glue-tvt_cola_seed1/a__lr1e-4__screen", "glue-tvt_cola_seed1/a__lr2e-4__screen",
        "glue-tvt_cola_seed1/a__lr5e-4__screen", "glue-tvt_rte_seed3/a__lr1e-4__screen",
        "glue-tvt_rte_seed3/a__lr2e-4__screen", "glue-tvt_rte_seed3/a__lr5e-4__screen"]
    assert all((j.typed.train.data_fraction, j.typed.train.max_steps) == (0.25, 10) for j in screen)
    full = [j for j in jobs if j.sweep.stage is Stage.FULL]
    assert len(full) == 3 * 3 and all(j.typed.train.data_fraction == 1.0 for j in full)
    assert full[0].key == "glue-tvt_cola_seed1/a__lr1e-4" and full[0].config["train"]["lr"] == 1e-4
    assert full[2].sweep == SweepRole(0, "lr1e-4", "demo/1/a/glue-tvt_rte", Stage.FULL, 2)
    assert screen[4].sweep == SweepRole(1, "lr2e-4", "demo/1/a/glue-tvt_rte", Stage.SCREEN)
    materialize(screen[0])
    told = json.loads((screen[0].job_dir / "overrides.json").read_text())
    assert [p for p in told if p["source"] == "sweep screen"] == [
        {"field": "train.data_fraction", "value": 0.25, "source": "sweep screen"},
        {"field": "HP_MAX_STEPS", "value": 10, "source": "sweep screen"}]


def test_the_roles_go_into_the_journal_and_stage_2_is_held(configs, tmp_path):
    jobs = expand(make_plan(configs, tmp_path, suites=[{"name": "demo"}], pairs=PAIRS[:1], sweep=STAGES),
                  SuiteRegistry(configs))
    store = Store(tmp_path / "journal.sqlite")
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [], 0.0)
    ids = store.add_jobs(run_id, [job_record(j) for j in jobs])
    assert [(j.id, j.role) for j in store.swept_jobs(run_id)] == [(i, j.sweep) for i, j in zip(ids, jobs)]
    assert store.held_jobs(run_id) == [(i, "demo/1/a/glue-tvt_cola", None) for i in ids[3:]]


@pytest.mark.parametrize("stages, says", [
    ({"screen": {"train.max_steps": 5}, "promote": 3}, "field 'sweep.stages.promote': expected a whole number from 1 to 2"),
    ({"screen": {"train.lr": 1.0}, "promote": 1}, "field 'sweep.stages.screen.train.lr': train.lr is swept"),
    ({"screen": {"train.max_stepz": 5}, "promote": 1}, "field 'sweep.stages.screen.train.max_stepz': unknown field"),
    ({"screen": {}, "promote": 1}, "field 'sweep.stages.screen': expected a mapping of field: value"),
    ({"screen": {"train.max_steps": 5}, "promote": 1, "keep": 2}, "field 'sweep.stages.keep': unknown field"),
    ("yes", "field 'sweep.stages': expected a mapping with screen and promote"),
])
def test_a_bad_stages_mapping_is_a_plan_problem_naming_its_field(configs, tmp_path, stages, says):
    with pytest.raises(PlanError) as caught:
        make_plan(configs, tmp_path, sweep={"grid": {"train.lr": [1.0e-4, 2.0e-4, 5.0e-4]}, "stages": stages})
    assert any(p.startswith(says) for p in caught.value.problems), caught.value.problems


def test_stages_need_a_sweep_of_points(configs, tmp_path):
    with pytest.raises(PlanError) as caught:
        make_plan(configs, tmp_path, sweep={"stages": {"screen": {"train.max_steps": 5}, "promote": 1}})
    assert caught.value.problems == ["field 'sweep.stages.promote': a two-stage search ranks a sweep's points, "
                                     "and this sweep has 0: add grid, zip or random"]


def test_a_bad_screen_value_is_named_as_the_configs_own_field_is(configs, tmp_path):
    plan = make_plan(configs, tmp_path, suites=[{"name": "demo"}],
                     sweep={**STAGES, "stages": {"screen": {"train.data_fraction": 1.5}, "promote": 1}})
    with pytest.raises(ConfigError) as caught:
        expand(plan, SuiteRegistry(configs))
    assert str(caught.value) == ("the plan's sweep stages.screen: train.data_fraction: expected a number in (0, 1], "
                                 "got 1.5")
