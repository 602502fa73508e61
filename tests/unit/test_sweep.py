"""``sweep:``: grid, zip and random points expand into one job per point, config and pair, each in a
folder named by its values, with the values in its provenance; a bad sweep is a plan problem naming
the field, before anything starts."""

import json
import math

import pytest
import yaml

from lat_core.config.suites import SuiteRegistry
from lat_core.errors import PlanError
from lat_core.front.jobs import expand, materialize
from lat_core.front.plan import Plan, load_plan
from lat_core.front.sweep import read_sweep, value_text
from tests.unit.test_jobs import make_plan
from tests.unit.test_plan import configs  # noqa: F401  (fixture)

GRID = {"grid": {"train.lr": [1.0e-4, 2.0e-4], "peft.r": [8, 16]}}
RANDOM = {"random": {"n": 6, "seed": 7, "space": {"train.lr": {"log_uniform": ["1e-5", "1e-3"]},
                                                   "peft.dropout": {"uniform": [0.0, 0.2]},
                                                   "train.batch_size": {"int_uniform": [2, 9]},
                                                   "peft.alpha": [8, 16, 32]}}}


def jobs_of(configs, tmp_path, **changes):
    return expand(make_plan(configs, tmp_path, **changes), SuiteRegistry(configs))


def test_a_2x2_grid_runs_4_jobs_per_config_and_pair_with_their_values(configs, tmp_path):
    jobs = jobs_of(configs, tmp_path, suites=[{"name": "E4", "rounds": [1]}], sweep=GRID)
    assert len(jobs) == 2 * 4 * 2  # configs a and b x 4 points x 2 pairs
    of_a = [j for j in jobs if j.config_path.endswith("a.yaml")]
    assert [j.key for j in of_a[:4]] == ["glue-tvt_cola_seed87/a__lr1e-4_r8", "glue-tvt_rte_seed13/a__lr1e-4_r8",
                                         "glue-tvt_cola_seed87/a__lr1e-4_r16", "glue-tvt_rte_seed13/a__lr1e-4_r16"]
    assert {(j.config["train"]["lr"], j.config["peft"]["r"]) for j in of_a} == {
        (1e-4, 8), (1e-4, 16), (2e-4, 8), (2e-4, 16)}
    assert all(j.typed.train.lr == j.config["train"]["lr"] for j in jobs)  # validated as it will train
    job = of_a[-1]
    assert job.job_dir == tmp_path / "out" / "glue-tvt_rte_seed13" / "a__lr2e-4_r16" and job.config["name"] == job.stem
    materialize(job)
    swept = [p for p in json.loads((job.job_dir / "overrides.json").read_text()) if p["source"] == "sweep"]
    assert swept == [{"field": "train.lr", "value": 2e-4, "source": "sweep"},
                     {"field": "peft.r", "value": 16, "source": "sweep"}]
    assert yaml.safe_load((job.job_dir / "job.yaml").read_text())["train"]["lr"] == 2e-4


def test_zip_takes_its_lists_in_step_and_multiplies_with_the_grid(configs, tmp_path):
    sweep = {"grid": {"peft.r": [4, 8]}, "zip": {"train.lr": [0.001, 0.002, 0.003], "train.warmup_steps": [0, 5, 10]}}
    jobs = jobs_of(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola"], sweep=sweep)
    assert [j.stem for j in jobs] == ["a__r4_lr1e-3_warmup-steps0", "a__r4_lr2e-3_warmup-steps5",
                                      "a__r4_lr3e-3_warmup-steps10", "a__r8_lr1e-3_warmup-steps0",
                                      "a__r8_lr2e-3_warmup-steps5", "a__r8_lr3e-3_warmup-steps10"]
    assert [(j.config["train"]["lr"], j.config["train"]["warmup_steps"]) for j in jobs[:3]] == [
        (0.001, 0), (0.002, 5), (0.003, 10)]


def test_random_draws_n_distinct_points_in_their_ranges_the_same_for_the_same_seed(configs, tmp_path):
    first = jobs_of(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola"], sweep=RANDOM)
    again = jobs_of(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola"], sweep=RANDOM)
    other_seed = {"random": {**RANDOM["random"], "seed": 8}}
    other = jobs_of(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola"], sweep=other_seed)
    assert [j.config for j in first] == [j.config for j in again] and len({j.stem for j in first}) == 6
    assert [j.stem for j in other] != [j.stem for j in first]
    for job in first:
        train, peft = job.config["train"], job.config["peft"]
        assert 1e-5 <= train["lr"] <= 1e-3 and 0 <= peft["dropout"] <= 0.2 and 2 <= train["batch_size"] <= 9
        assert isinstance(train["batch_size"], int) and peft["alpha"] in (8, 16, 32)
        assert train["lr"] == float(f"{train['lr']:.3g}")  # rounded: the value is the one the folder names
        assert f"lr{value_text(train['lr'])}_" in job.stem


def test_the_seeds_variables_sweep_their_field_over_the_launching_shell(configs, tmp_path):
    plan = make_plan(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola"],
                     sweep={"grid": {"HP_BATCH_SIZE": [4, 8]}, "zip": {"train.lr": ["5e-4", "6e-4"]}})
    jobs = expand(plan, SuiteRegistry(configs), shell_env={"HP_BATCH_SIZE": "2", "HP_LR": "0.1"})
    assert [(j.config["train"]["batch_size"], j.config["train"]["lr"]) for j in jobs] == [
        (4, 5e-4), (4, 6e-4), (8, 5e-4), (8, 6e-4)]
    assert jobs[0].stem == "a__batch-size4_lr5e-4"


def test_a_suite_entry_sweep_replaces_the_plans_there(configs, tmp_path):
    jobs = jobs_of(configs, tmp_path, pairs=["1:glue-tvt_cola"], sweep={"grid": {"peft.r": [4, 8]}},
                   suites=[{"name": "demo"}, {"name": "E4", "rounds": [1], "sweep": {"grid": {"train.lr": [0.1]}}}])
    assert [j.stem for j in jobs] == ["a__r4", "a__r8", "a__lr0.1", "b__lr0.1"]


def test_epochs_from_a_sweep_outrank_max_steps_from_the_shell(configs, tmp_path):
    plan = make_plan(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola"],
                     sweep={"grid": {"train.epochs": [1, 2]}})
    job = expand(plan, SuiteRegistry(configs), shell_env={"HP_MAX_STEPS": "7"})[0]
    assert job.config["train"]["epochs"] == 1 and "max_steps" not in job.config["train"]


@pytest.mark.parametrize("sweep, says", [
    ({"grid": {"train.lrr": [1]}}, "field 'sweep.grid.train.lrr': unknown field 'train.lrr' (did you mean train.lr?)"),
    ({"grid": {"seed": [1, 2]}}, "field 'sweep.grid.seed': seed is set by the pairs"),
    ({"grid": {"HP_NOPE": [1]}}, "field 'sweep.grid.HP_NOPE': unknown variable 'HP_NOPE'"),
    ({"grid": {"train.lr": []}}, "field 'sweep.grid.train.lr': expected a non-empty list"),
    ({"grid": {"train.lr": [1, 1.0]}}, "field 'sweep.grid.train.lr': value 1 is listed twice"),
    ({"zip": {"train.lr": [1, 2], "peft.r": [4]}}, "field 'sweep.zip': its lists must have one length"),
    ({"grid": {"train.lr": [1]}, "zip": {"HP_LR": [2]}}, "field 'sweep': train.lr is swept more than once"),
    ({"random": {"n": 3, "space": {"train.lr": {"log_uniform": [0, 1]}}}},
     "field 'sweep.random.space.train.lr.log_uniform': a log-uniform range needs low > 0"),
    ({"random": {"n": 3, "space": {"train.lr": {"uniform": [2, 1]}}}},
     "field 'sweep.random.space.train.lr.uniform': expected low < high"),
    ({"random": {"n": 5, "space": {"peft.r": [4, 8]}}}, "field 'sweep.random.n': 5 distinct points asked"),
    ({"random": {"space": {"peft.r": [4, 8]}}}, "field 'sweep.random.n': expected a whole number"),
    ({"grid": {f"eval.{f}": list(range(1, 12)) for f in ("gen_max_length", "num_beams", "max_target_len",
                                                         "gen_min_length")}}, "field 'sweep': 14,641 points"),
    ({"lattice": {}}, "field 'sweep.lattice': unknown part"),
])
def test_a_bad_sweep_is_a_plan_problem_naming_its_field(configs, tmp_path, sweep, says):
    with pytest.raises(PlanError) as caught:
        make_plan(configs, tmp_path, sweep=sweep)
    assert any(p.startswith(says) for p in caught.value.problems), caught.value.problems


def test_a_suite_entrys_bad_sweep_names_the_entry(configs, tmp_path):
    with pytest.raises(PlanError) as caught:
        make_plan(configs, tmp_path, suites=["demo", {"name": "E4", "sweep": {"grid": {"peft.rr": [1]}}}])
    assert caught.value.problems[0].startswith("field 'suites[1].sweep.grid.peft.rr': unknown field")


def test_a_saved_plan_keeps_its_sweeps(configs, tmp_path):
    plan = make_plan(configs, tmp_path, sweep=RANDOM, suites=[{"name": "E4", "sweep": GRID}])
    again = Plan.model_validate(yaml.safe_load(plan.to_yaml()))
    assert again.sweep == plan.sweep and again.suites[0].sweep == GRID
    assert [j.key for j in expand(again, SuiteRegistry(configs))] == [j.key for j in expand(plan, SuiteRegistry(configs))]


@pytest.mark.parametrize("value, text", [(2e-4, "2e-4"), (1.5e-5, "1.5e-5"), (0.05, "0.05"), (1e-3, "1e-3"),
                                         (16.0, "16"), (3e5, "3e5"), (-2e-4, "-2e-4"), (True, "true"),
                                         (("q_proj", "v_proj"), "q_proj-v_proj"), (math.pi, "3.141592653589793")])
def test_values_are_named_as_short_as_they_read(value, text):
    assert value_text(value) == text


def test_no_sweep_is_one_point_without_a_name():
    assert read_sweep({}) == read_sweep(None) and read_sweep({})[1] == []


def test_the_sweep_flag_is_a_grid_saved_with_the_plan_and_added_to_a_plan_files(configs, tmp_path):
    from lat_tui.cli import main

    out, again = tmp_path / "saved.yaml", tmp_path / "again.yaml"
    base = ["--configs", str(configs), "--suite", "demo", "--pairs", "1:glue-tvt_cola", "--gpus", "cpu"]
    assert main([*base, "--sweep", "train.lr=1e-4,2e-4,5e-4", "--sweep", "peft.r=8,16", "--save-plan", str(out)]) == 0
    assert main(["--configs", str(configs), "--plan", str(out), "--sweep", "peft.r=4", "--save-plan", str(again)]) == 0
    saved = load_plan(again, SuiteRegistry(configs))
    assert [j.stem for j in expand(saved, SuiteRegistry(configs))] == ["a__lr1e-4_r4", "a__lr2e-4_r4", "a__lr5e-4_r4"]


@pytest.mark.parametrize("flag, says", [
    ("train.lrr=1,2", "--sweep (sweep.grid.train.lrr): unknown field 'train.lrr' (did you mean train.lr?)"),
    ("train.lr", "--sweep 'train.lr': expected FIELD=VALUE,VALUE,..."),
])
def test_a_bad_sweep_flag_exits_2_naming_it(configs, capsys, flag, says):
    from lat_tui.cli import main

    code = main(["--configs", str(configs), "--suite", "demo", "--pairs", "1:glue-tvt_cola", "--gpus", "cpu",
                 "--sweep", flag, "--save-plan", "/dev/null"])
    assert code == 2 and says in capsys.readouterr().err
