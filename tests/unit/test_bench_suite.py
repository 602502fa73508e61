"""The suite benchmark's sides and loss check (bench/bench_suite_throughput.py), without a GPU."""
from argparse import Namespace
from pathlib import Path

import pytest

from bench.bench_suite_throughput import EARLY_STEPS, compare_losses, plan_mapping

ROOT = Path(__file__).resolve().parents[2]


def _side(losses: dict) -> dict:
    return {"losses": losses}


def test_the_loss_check_asks_1e_2_of_the_early_steps_and_reports_the_whole_curve():
    ref = [11.0 - 0.1 * s for s in range(EARLY_STEPS)] + [0.02, 0.01]
    close = [x * (1 + 5e-3) for x in ref[:EARLY_STEPS]] + [0.05, 0.01]   # near 0 late: 150% apart
    check = compare_losses(_side({"a": ref}), _side({"a": close}))
    assert check["ok"] and check["step1_rel_diff"] == 5e-3 and check["max_rel_diff"] == 1.5
    assert check["worst_job"] == "a"
    late = abs(0.02 - 0.05) / 0.02   # the mean: every step's difference, the early ones 5e-3 each
    assert check["mean_rel_diff"] == pytest.approx((EARLY_STEPS * 5e-3 + late) / (EARLY_STEPS + 2), abs=1e-6)
    off = list(close)
    off[EARLY_STEPS - 1] = ref[EARLY_STEPS - 1] * 1.02
    assert not compare_losses(_side({"a": ref}), _side({"a": off}))["ok"]
    short = compare_losses(_side({"a": ref}), _side({"a": ref[:-1]}))
    assert not short["ok"] and "12 losses vs 11" in short["why"]


def test_each_side_sets_its_speed_modes_and_lat_leaves_them_to_the_defaults():
    from lat_core.config.paths import config_trees
    from lat_core.config.suites import SuiteRegistry
    from lat_core.front.plan import plan_from_mapping
    args = Namespace(steps=3, suite="gla_rank_sweep", gpu=-1, sweep=[])

    def plan(side):
        mapping = plan_mapping(args, side, Path("/tmp/unused"), None, {})
        return mapping, plan_from_mapping(mapping, SuiteRegistry(config_trees()), where=side)

    mapping, lat = plan("lat")
    assert lat.fuse == "auto" and not {"graphs", "pack"} & set(mapping["overrides"]["train"])
    mapping, eager = plan("lat-eager")
    assert eager.fuse is False and {k: mapping["overrides"]["train"][k] for k in ("graphs", "pack")} == \
        {"graphs": False, "pack": False}
    mapping, fused = plan("lat+fuse+graphs")   # fused whatever fuse: auto's measurement says
    assert fused.fuse is True and mapping["overrides"]["train"]["graphs"] == "auto"
    assert plan("lat-eager-pack")[0]["overrides"]["train"]["pack"] is True
    assert plan("old")[0]["slots"] == 3


def test_data_and_sides_are_lists_and_unknown_names_are_refused(capsys):
    import pytest

    from bench.bench_suite_throughput import parse_args
    args = parse_args(["--data", "tiny,long"])
    assert args.data == ["tiny", "long"] and args.sides == ["old", "lat-eager", "lat"]
    with pytest.raises(SystemExit) as exc:
        parse_args(["--data", "tiny,lnog", "--sides", "lat,fast"])
    assert exc.value.code == 2 and "unknown data or side: lnog, fast" in capsys.readouterr().err


def test_a_reference_joins_only_the_sides_of_the_same_data_this_call_did_not_run(tmp_path):
    import json

    from bench.bench_suite_throughput import joined
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps([{"data": "long", "side": "old"}, {"data": "tiny", "side": "old"},
                               {"data": "long", "side": "lat"}, {"side": "lat-eager"}]))
    mine = [{"data": "long", "side": "lat"}]
    got = joined(mine, str(ref), "long", ["lat"])
    assert [(r.get("data"), r["side"]) for r in got] == [("long", "old"), (None, "lat-eager"), ("long", "lat")]
    assert got[0]["from"] == str(ref) and "from" not in got[-1]
    assert joined(mine, None, "long", ["lat"]) == mine


def test_the_cold_start_figure_is_the_first_step_of_any_job_after_the_start(tmp_path):
    from bench.bench_suite_throughput import first_step_after
    from lat_core.contract.jobdir import Started, Step
    from lat_core.contract.jobdir.event_writer import EventWriter

    for name, first in (("a", 1041.5), ("b", 1012.25)):
        (tmp_path / name).mkdir()
        with EventWriter(tmp_path / name / "events.jsonl") as w:
            w.write(Started(t=1001.0, pid=1))
            w.write(Step(t=first, step=1, loss=1.0))
            w.write(Step(t=first + 5, step=2, loss=0.9))
    (tmp_path / "none").mkdir()  # a job that logged no step yet counts for nothing
    assert first_step_after([tmp_path / "a", tmp_path / "b", tmp_path / "none"], 1000.0) == 12.2
    assert first_step_after([tmp_path / "none"], 1000.0) is None


def test_a_mamba_suite_runs_8_jobs_on_the_mamba_130m_shape_and_says_which_kernels_its_jobs_ran(tmp_path):
    from bench.bench_suite_throughput import mamba_fast_path
    from lat_core.config.paths import config_trees
    from lat_core.config.suites import SuiteRegistry
    from lat_core.contract.jobdir import Started
    from lat_core.contract.jobdir.event_writer import EventWriter
    from lat_core.front.jobs import expand
    from lat_core.front.plan import plan_from_mapping
    registry = SuiteRegistry(config_trees())
    for gpu, sizes in ((0, {"hidden_size": 768, "num_hidden_layers": 24, "state_size": 16, "vocab_size": 50280}),
                       (-1, {"hidden_size": 32, "num_hidden_layers": 1, "state_size": 8})):
        args = Namespace(steps=3, suite="mamba_lora", gpu=gpu, sweep=[("train.lr", ["1e-3", "5e-4", "2e-4", "1e-4"])])
        jobs = expand(plan_from_mapping(plan_mapping(args, "lat+fuse", tmp_path, None, {}), registry, where="mamba"),
                      registry, {})
        assert len(jobs) == 8 and {j.config["model"]["family"] for j in jobs} == {"mamba"}
        assert all(j.config["model"]["tiny"] == sizes for j in jobs), gpu
    for name, fast in (("a", False), ("b", False), ("member", None)):
        (tmp_path / name).mkdir()
        with EventWriter(tmp_path / name / "events.jsonl") as w:
            w.write(Started(t=1.0, pid=1, mamba_fast_path=fast))
    assert mamba_fast_path([tmp_path / n for n in ("a", "b", "member")]) == {"mamba_fast_path": False}
    assert mamba_fast_path([tmp_path / "member"]) == {}   # GLA, or fused members: nothing said


def test_each_side_gets_its_steady_rate_over_lat_eager_the_speed_up_fuse_auto_records():
    from bench.bench_suite_throughput import compare_sides
    sides = [{"side": "lat-eager", "wall_s": 10.0, "steady_tokens_per_s": 3000, "losses": {"a": [1.0]}},
             {"side": "lat+fuse", "wall_s": 5.0, "steady_tokens_per_s": 2400, "losses": {"a": [1.0]}},
             {"side": "lat", "wall_s": 5.0, "steady_tokens_per_s": None, "losses": {"a": [1.0]}}]
    compare_sides(sides)
    assert sides[1]["steady_vs_lat-eager"] == 0.8 and "steady_vs_lat-eager" not in sides[2]
    assert "steady_vs_lat-eager" not in sides[0] and sides[1]["loss_check_vs_lat-eager"]["ok"]


def test_a_sides_row_carries_each_groups_account_of_its_loop(tmp_path):
    from bench.bench_suite_throughput import group_loops
    from lat_core.contract.jobdir import JobDir
    leader, member, alone = (tmp_path / name for name in ("leader", "member", "alone"))
    for folder in (leader, member, alone):
        folder.mkdir()
    line = "group loop: 200 passes in 90.0 s, 450 ms a pass; building and queueing passes 3.0 s (3%)"
    JobDir(leader).train_log.write_text(f"step 200/200 loss 0.1\n{line}\ngroup wall time 95.0s\n")
    JobDir(member).train_log.write_text("step 200/200 loss 0.2\n")
    assert group_loops([leader, member, alone]) == {"group_loops": [line]}
    assert group_loops([member, alone]) == {}


def test_a_sides_row_says_where_the_time_before_its_first_step_went(tmp_path):
    from bench.bench_suite_throughput import start_up
    from lat_core.contract.jobdir import ExitRecord, JobDir, Started, Step
    from lat_core.contract.jobdir.event_writer import EventWriter

    phases = {"imports": 0.1, "members": 0.4, "data": 1.2, "model": 6.5, "adapter": 0.3}
    for name, launched, first in (("late", 1020.0, 1041.5), ("first", 1030.0, 1039.25)):
        (tmp_path / name).mkdir()
        with EventWriter(tmp_path / name / "events.jsonl") as w:
            w.write(Started(t=launched + 8.5, pid=1, setup_s=phases, kernels="warmed in the preload process in 12 s"))
            w.write(Step(t=first, step=1, loss=1.0))
        JobDir(tmp_path / name).ensure_runner_dir()
        JobDir(tmp_path / name).attempt(1).write_exit(ExitRecord(0, started=launched, ended=first + 10))
    (tmp_path / "none").mkdir()
    row = start_up([tmp_path / "late", tmp_path / "first", tmp_path / "none"], 1000.0)
    assert row == {"start_up": {"job": "first", "launched_s": 30.0, "set_up_s": 38.5, "setup_phases": phases,
                                "first_step_s": 39.2, "kernels": "warmed in the preload process in 12 s"}}
    assert start_up([tmp_path / "none"], 1000.0) == {}


def test_the_long_rows_are_a_task_the_engine_judges_long_and_the_trainer_reads(tmp_path):
    """--data long: admission's prior and fuse: auto must see 256-token rows (under SST-2's name a Mamba job's
    prior was 15.8 GiB for about 40 GiB of use, and 8 jobs admitted at once ran out of an H200's memory)."""
    import yaml

    from bench.suite_data import write_rte
    from lat_core.config.fuse_measured import Rows, rows_of
    from lat_core.config.job import parse_config
    from lat_core.config.memory_prior import estimate
    from lat_core.train.datasets import load_glue

    glue = write_rte(tmp_path / "glue", n_train=10, n_dev=4)
    mapping = plan_mapping(Namespace(steps=2, suite="mamba_lora", gpu=0, sweep=[]), "lat-eager", tmp_path, glue, {})
    raw = yaml.safe_load((ROOT / "configs/experiments/mamba130m/lora_proj_r8.yaml").read_text())
    raw["model"].update(mapping["overrides"]["model"])
    raw["train"].update(mapping["overrides"]["train"])
    raw["data"] = mapping["pairs"][0].split(":", 1)[1]   # the plan's pair: seed 1 on the bench's data
    raw["output_dir"] = str(tmp_path / "job")
    cfg = parse_config(raw, environ={})
    assert rows_of(cfg) is Rows.LONG
    assert estimate(cfg, {}).peak(False)[0] > 35 * 2**30   # Mamba-130m's slow path, 16 x 256 tokens: ~40 GiB

    data = load_glue("rte", "", {"GLUE_LOCAL_DIR": str(glue)})
    assert len(data.train) + len(data.validation) == 10 and len(data.test) == 4
    assert len(data.train[0]["text"].split()) > 300   # fills any max_seq_len up to 300 word tokens
