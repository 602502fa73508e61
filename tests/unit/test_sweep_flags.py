"""A sweep's zip and random parts on the command line (``--sweep-zip``, ``--sweep-random`` with
``--sweep-draws`` and ``--sweep-seed``): the same points as the plan's ``sweep:``, saved with the
plan, added to a plan file's, and a bad value exits 2 naming its flag."""

import pytest
import yaml

from lat_core.config.suites import SuiteRegistry
from lat_core.front.jobs import expand
from lat_core.front.plan import load_plan
from lat_tui.cli import main
from tests.unit.test_jobs import make_plan
from tests.unit.test_plan import configs  # noqa: F401  (fixture)

PAIR = ["--suite", "demo", "--pairs", "1:glue-tvt_cola", "--gpus", "cpu"]


def saved_stems(configs, tmp_path, *flags) -> list[str]:
    out = tmp_path / "saved.yaml"
    assert main(["--configs", str(configs), *PAIR, *flags, "--save-plan", str(out)]) == 0
    return [job.stem for job in expand(load_plan(out, SuiteRegistry(configs)), SuiteRegistry(configs))]


def test_zip_flags_take_their_lists_in_step_and_multiply_with_the_grid(configs, tmp_path):
    assert saved_stems(configs, tmp_path, "--sweep-zip", "train.warmup_steps=0,10", "--sweep-zip", "HP_MAX_STEPS=40,80",
                       "--sweep", "peft.r=4,8") == [
        "a__r4_warmup-steps0_max-steps40", "a__r4_warmup-steps10_max-steps80",
        "a__r8_warmup-steps0_max-steps40", "a__r8_warmup-steps10_max-steps80"]


def test_random_flags_draw_the_points_the_plans_random_draws_for_the_same_seed(configs, tmp_path):
    stems = saved_stems(configs, tmp_path, "--sweep-random", "train.lr=log_uniform:1e-5,1e-3",
                        "--sweep-random", "peft.alpha=8,16,32", "--sweep-draws", "3", "--sweep-seed", "7")
    space = {"train.lr": {"log_uniform": [1.0e-5, 1.0e-3]}, "peft.alpha": [8, 16, 32]}
    plan = make_plan(configs, tmp_path, suites=[{"name": "demo"}], pairs=["1:glue-tvt_cola"],
                     sweep={"random": {"n": 3, "seed": 7, "space": space}})
    assert len(stems) == 3 and stems == [job.stem for job in expand(plan, SuiteRegistry(configs))]
    assert saved_stems(configs, tmp_path, "--sweep-random", "train.lr=log_uniform:1e-5,1e-3", "--sweep-random",
                       "peft.alpha=8,16,32", "--sweep-draws", "3", "--sweep-seed", "7") == stems  # reproducible


def test_the_flags_add_to_a_plan_files_sweep_and_win(configs, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"suites": ["demo"], "pairs": ["1:glue-tvt_cola"], "gpus": "cpu",
                                    "sweep": {"random": {"n": 4, "seed": 1, "space": {"peft.r": [4, 8, 16, 32]}},
                                              "zip": {"train.warmup_steps": [0, 10]}}}))
    out = tmp_path / "saved.yaml"
    assert main(["--configs", str(configs), "--plan", str(plan), "--sweep-draws", "2", "--sweep-random",
                 "peft.alpha=8,16", "--save-plan", str(out)]) == 0
    sweep = yaml.safe_load(out.read_text())["sweep"]
    assert sweep == {"random": {"n": 2, "seed": 1, "space": {"peft.r": [4, 8, 16, 32], "peft.alpha": [8, 16]}},
                     "zip": {"train.warmup_steps": [0, 10]}}


@pytest.mark.parametrize("flags, says", [
    (["--sweep-random", "peft.r=4,8", "--sweep-draws", "0"],
     "--sweep-draws: expected a whole number from 1 to 10,000, got 0"),
    (["--sweep-random", "train.lr=log_uniform:0,1e-3", "--sweep-draws", "2"],
     "--sweep-random (sweep.random.space.train.lr.log_uniform): a log-uniform range needs low > 0"),
    (["--sweep-random", "train.lr=normal:0,1", "--sweep-draws", "2"],
     "--sweep-random (sweep.random.space.train.lr): a range is one of uniform, log_uniform, int_uniform"),
    (["--sweep-random", "peft.r", "--sweep-draws", "2"], "--sweep-random 'peft.r': expected FIELD=VALUE,VALUE,..."),
    (["--sweep-random", "peft.r=4,8"], "--sweep-draws: expected a whole number from 1 to 10,000, got None"),
    (["--sweep-draws", "2"], "--sweep-random (sweep.random.space): expected a mapping of field"),
    (["--sweep-random", "peft.r=4,8", "--sweep-draws", "3"],
     "--sweep-draws: 3 distinct points asked, but its space holds 2"),
    (["--sweep-zip", "train.lr=1e-4,2e-4", "--sweep-zip", "peft.r=4"],
     "--sweep-zip: its lists must have one length, got train.lr: 2, peft.r: 1"),
    (["--sweep-zip", "train.lrr=1,2"], "--sweep-zip (sweep.zip.train.lrr): unknown field 'train.lrr' (did you mean"),
    (["--sweep-zip", "train.lr"], "--sweep-zip 'train.lr': expected FIELD=VALUE,VALUE,..."),
])
def test_a_bad_zip_or_random_flag_exits_2_naming_it(configs, capsys, flags, says):
    code = main(["--configs", str(configs), *PAIR, *flags, "--save-plan", "/dev/null"])
    assert code == 2 and says in capsys.readouterr().err


def test_draws_that_are_no_number_are_refused_by_the_parser_naming_the_flag(configs, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--configs", str(configs), *PAIR, "--sweep-random", "peft.r=4,8", "--sweep-draws", "many"])
    assert exited.value.code == 2 and "argument --sweep-draws: invalid int value: 'many'" in capsys.readouterr().err
