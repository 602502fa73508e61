"""``sweep: {halving: ...}``: every job of the sweep gets its race (config, dataset, seed, stage), the
rungs and eta; a bad rule is a plan problem naming its field."""

import pytest

from lat_core.config.suites import SuiteRegistry
from lat_core.contract.sweep_roles import Stage, SweepRole
from lat_core.errors import PlanError
from lat_core.front.jobs import expand
from tests.unit.test_jobs import make_plan
from tests.unit.test_plan import configs  # noqa: F401  (fixture)

GRID = {"train.lr": [1.0e-4, 2.0e-4, 5.0e-4]}


def test_each_job_races_with_the_points_of_its_config_dataset_and_seed(configs, tmp_path):
    jobs = expand(make_plan(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola", "2:glue-tvt_cola"],
                            sweep={"grid": GRID, "halving": {"eta": 3, "min_steps": 10}}), SuiteRegistry(configs))
    assert [j.key for j in jobs[:2]] == ["glue-tvt_cola_seed1/a__lr1e-4", "glue-tvt_cola_seed2/a__lr1e-4"]
    rungs = tuple(10 * 3 ** k for k in range(12))
    assert jobs[3].sweep == SweepRole(1, "lr2e-4", "demo/1/a/glue-tvt_cola", Stage.ONLY,
                                      race="demo/1/a/glue-tvt_cola/seed2/only", rungs=rungs, eta=3)


def test_with_stages_each_stage_races_apart(configs, tmp_path):
    sweep = {"grid": GRID, "halving": {"rungs": [5, 20]},
             "stages": {"screen": {"train.max_steps": 20}, "promote": 1}}
    jobs = expand(make_plan(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola"], sweep=sweep),
                  SuiteRegistry(configs))
    assert {(j.sweep.stage, j.sweep.race, j.sweep.rungs, j.sweep.eta) for j in jobs} == {
        (Stage.SCREEN, "demo/1/a/glue-tvt_cola/seed1/screen", (5, 20), 3),
        (Stage.FULL, "demo/1/a/glue-tvt_cola/seed1/full", (5, 20), 3)}


@pytest.mark.parametrize("halving, says", [
    ({"eta": 1, "min_steps": 10}, "field 'sweep.halving.eta': expected a whole number >= 2"),
    ({"eta": 2}, "field 'sweep.halving': expected min_steps (rungs at min_steps, x eta"),
    ({"min_steps": 10, "rungs": [10]}, "field 'sweep.halving': expected min_steps"),
    ({"rungs": [20, 10]}, "field 'sweep.halving.rungs': expected increasing whole numbers"),
    ({"min_steps": 0}, "field 'sweep.halving.min_steps': expected a whole number >= 1"),
    ({"min_steps": 10, "patience": 2}, "field 'sweep.halving.patience': unknown field"),
    ("fast", "field 'sweep.halving': expected a mapping with eta and min_steps"),
])
def test_a_bad_halving_rule_is_a_plan_problem_naming_its_field(configs, tmp_path, halving, says):
    with pytest.raises(PlanError) as caught:
        make_plan(configs, tmp_path, sweep={"grid": GRID, "halving": halving})
    assert any(p.startswith(says) for p in caught.value.problems), caught.value.problems


def test_halving_needs_a_sweep_of_points(configs, tmp_path):
    with pytest.raises(PlanError) as caught:
        make_plan(configs, tmp_path, sweep={"halving": {"min_steps": 10}})
    assert caught.value.problems == ["field 'sweep.halving': halving races a sweep's points: add grid, zip or random"]
