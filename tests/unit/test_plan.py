"""Plan validation: every bad plan gets a message naming the file, the field and the expectation."""

from pathlib import Path

import pytest
import yaml

from lat_core.config.paths import config_trees
from lat_core.config.suites import SuiteRegistry
from lat_core.errors import PlanError
from lat_core.front.plan import load_plan
from lat_tui.cli import build_parser, plan_from_args


@pytest.fixture
def configs(tmp_path) -> Path:
    root = tmp_path / "configs"
    (root / "experiments" / "gla").mkdir(parents=True)
    (root / "suites").mkdir()
    for stem in ("a", "b", "c"):
        (root / "experiments" / "gla" / f"{stem}.yaml").write_text("model: {family: gla}\ntrain: {lr: 0.001}\n")
    suite = {"name": "E4", "rounds": {1: ["gla/a.yaml", "gla/b.yaml"], 2: ["gla/c.yaml", "gla/c.yaml"]}}
    (root / "suites" / "E4.yaml").write_text(yaml.safe_dump(suite))
    (root / "suites" / "demo.yaml").write_text(yaml.safe_dump({"rounds": {1: ["gla/a.yaml"]}}))
    return root


GOOD = {"suites": [{"name": "E4", "rounds": "all"}], "pairs": ["87:glue-tvt_cola"], "gpus": [2, 3, 5, 6],
        "slots": [3, 3, 1, 3], "countdown_minutes": 5, "output_root": "runs/x"}


def write_plan(tmp_path, data) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def with_(**changes):
    data = {**GOOD, **changes}
    return {k: v for k, v in data.items() if v is not _DROP}


_DROP = object()

BAD_PLANS = [
    ("suites: [E4\npairs: x", "not valid YAML: line"),
    ("- just\n- a list\n", "expected a mapping of plan fields, got list"),
    (with_(gpu_plan="3,3"), "unknown field 'gpu_plan'"),
    (with_(suites=_DROP), "field 'suites' is required"),
    (with_(suites=[]), "field 'suites'"),
    (with_(suites=["E5"]), "field 'suites[0]'"),
    (with_(suites=[{"name": "E4", "rounds": [3]}]), "suite 'E4' has no round 3 (rounds: 1, 2)"),
    (with_(suites=[{"name": "E4", "rounds": "first"}]), "field 'suites[0].rounds'"),
    (with_(suites=[{"name": "E4", "round": 1}]), "unknown field 'suites[0].round'"),
    (with_(pairs=["87-glue-tvt_cola"]), "expected 'seed:dataset'"),
    (with_(pairs=["x:glue-tvt_cola"]), "expected 'seed:dataset'"),
    (with_(pairs=["87:glue-tvt_cola", "87:glue-tvt_cola"]), "pair 87:glue-tvt_cola is listed twice"),
    (with_(pairs=["87:glue_cola"]), "unknown dataset 'glue_cola'"),
    (with_(pairs=["87:./missing_dir"]), "dataset directory"),
    (with_(pairs=[]), "field 'pairs'"),
    (with_(gpus=[2, 2, 5, 6]), "a GPU is listed twice"),
    (with_(gpus=[-1, 3, 5, 6]), "GPU indices must be >= 0"),
    (with_(gpus="two three"), "expected GPU indexs separated"),
    (with_(slots=[3, 3, 1]), "field 'slots': expected one number or 4 (one per device)"),
    (with_(slots=[3, -1, 1, 3]), "slot counts must be >= 0"),
    (with_(slots=0), "every device has 0 slots"),
    (with_(gpus="cpu", slots=[1, 2]), "expected one number or 1 (one per device) for the CPU"),
    (with_(countdown_minutes=-5), "field 'countdown_minutes'"),
    (with_(countdown_minutes="soon"), "field 'countdown_minutes'"),
    (with_(env={"HP_BATCH_SIZE": "eight"}), "field 'env.HP_BATCH_SIZE': HP_BATCH_SIZE='eight': expected a positive integer"),
    (with_(env={"GRADIENT_CHECKPOINTING": "maybe"}), "GRADIENT_CHECKPOINTING='maybe': expected a boolean"),
    (with_(env={"BAD-NAME": "1"}), "'BAD-NAME' is not a valid environment variable name"),
    (with_(env={"HP_LR": [1, 2]}), "env.HP_LR: expected a string or number"),
    (with_(output_root=""), "field 'output_root'"),
    (with_(on_oom={"remedies": ["buy_more_gpus"]}), "field 'on_oom.remedies': unknown remedy 'buy_more_gpus'"),
    (with_(on_oom={"remedies": ["smaller_micro_batch"], "max_retries": 0}), "field 'on_oom.max_retries'"),
    (with_(resume=True, overwrite=True), "fields 'resume' and 'overwrite' exclude each other"),
    (with_(on_failure={"classes": ["cosmic_rays"]}), "field 'on_failure.classes': unknown failure class 'cosmic_rays'"),
    (with_(on_failure={"classes": ["cuda_oom"]}), "'cuda_oom' is retried with a remedy by 'on_oom'"),
    (with_(on_failure={"classes": ["ok"]}), "unknown failure class 'ok'"),
    (with_(on_failure={"classes": ["nccl"], "backoff_s": -1}), "field 'on_failure.backoff_s'"),
]


def test_on_failure_takes_the_classes_triage_produces_and_round_trips(tmp_path, configs):
    data = with_(on_failure={"classes": ["rendezvous", "nccl"], "max_retries": 3, "backoff_s": 10})
    plan = load_plan(write_plan(tmp_path, data), SuiteRegistry(configs))
    assert plan.on_failure.classes == ["rendezvous", "nccl"] and plan.on_failure.backoff_s == 10
    again = yaml.safe_load(plan.to_yaml())["on_failure"]
    assert again == {"classes": ["rendezvous", "nccl"], "max_retries": 3, "backoff_s": 10.0}


@pytest.mark.parametrize("data,expected", BAD_PLANS, ids=[f"bad{i}" for i in range(len(BAD_PLANS))])
def test_bad_plans_are_rejected_with_a_clear_message(tmp_path, configs, data, expected):
    path = write_plan(tmp_path, data)
    with pytest.raises(PlanError) as info:
        load_plan(path, SuiteRegistry(configs))
    message = str(info.value)
    assert str(path) in message  # names the file
    assert expected in message, message


def test_every_problem_is_reported_at_once(tmp_path, configs):
    path = write_plan(tmp_path, with_(gpus=[1, 1], countdown_minutes=-1, bogus=True))
    with pytest.raises(PlanError) as info:
        load_plan(path, SuiteRegistry(configs))
    assert len(info.value.problems) == 3


def test_good_plan_loads(tmp_path, configs):
    plan = load_plan(write_plan(tmp_path, GOOD), SuiteRegistry(configs))
    assert plan.slot_plan() == [3, 3, 1, 3]
    assert plan.gpus == [2, 3, 5, 6]
    assert [str(p) for p in plan.pairs] == ["87:glue-tvt_cola"]


def test_seed_flags_give_the_same_plan_as_yaml(tmp_path, configs):
    argv = ["--configs", str(configs), "--suite", "E4", "--round", "all", "--pairs",
            "87:glue-tvt_cola 13:glue-tvt_rte", "--gpus", "2 3 5 6", "--gpu-plan", "3,3,1,3",
            "--sleep-mins", "5", "--output-root", "runs/x", "--env", "HP_BATCH_SIZE=4"]
    from_flags = plan_from_args(build_parser().parse_args(argv))
    yaml_plan = load_plan(write_plan(tmp_path, with_(pairs=["87:glue-tvt_cola", "13:glue-tvt_rte"],
                                                    env={"HP_BATCH_SIZE": 4})), SuiteRegistry(config_trees(configs)))
    assert from_flags == yaml_plan and from_flags.configs == str(configs)  # the user tree, both ways


def test_save_plan_round_trips(tmp_path, configs):
    out = tmp_path / "saved.yaml"
    argv = ["--configs", str(configs), "--suite", "E4", "--round", "1,2", "--pairs", "87:glue-tvt_cola",
            "--gpus", "0 1", "--gpu-plan", "2", "--save-plan", str(out)]
    from lat_tui.cli import main

    assert main(argv) == 0
    reloaded = load_plan(out, SuiteRegistry(configs))
    assert reloaded.suites[0].rounds == [1, 2] and reloaded.slot_plan() == [2, 2]


def test_flag_errors_name_the_flag(configs, capsys):
    from lat_tui.cli import main

    code = main(["--configs", str(configs), "--suite", "E4", "--pairs", "87:glue-tvt_cola", "--gpus", "0 1",
                 "--gpu-plan", "1,2,3", "--save-plan", "/dev/null"])
    assert code == 2
    assert "--gpu-plan: expected one number or 2" in capsys.readouterr().err


def test_plan_file_plus_flag_overrides(tmp_path, configs):
    path = write_plan(tmp_path, GOOD)
    args = build_parser().parse_args(["--configs", str(configs), "--plan", str(path), "--gpus", "0", "--gpu-plan", "1"])
    plan = plan_from_args(args)
    assert plan.gpus == [0] and plan.slot_plan() == [1] and plan.countdown_minutes == 5


def test_slots_default_to_auto_one_job_per_core_each_gpu_has_capped():
    from lat_core.front.plan import AUTO_SLOTS_CAP, Plan, auto_gpu_slots

    plan = Plan(suites=["demo"], pairs=["1:tiny-sst2"], gpus=[0, 1])
    assert plan.slots == "auto"
    assert plan.slot_plan(cpu_count=16) == [8, 8]
    assert plan.slot_plan(cpu_count=256) == [AUTO_SLOTS_CAP] * 2
    assert auto_gpu_slots(4, cpu_count=2) == 1  # never zero
    assert Plan(suites=["demo"], pairs=["1:tiny-sst2"]).slot_plan(cpu_count=64) == [1]  # CPU jobs: one at a time
    assert Plan(suites=["demo"], pairs=["1:tiny-sst2"], gpus=[0], slots="AUTO ").slots == "auto"
    assert Plan(suites=["demo"], pairs=["1:tiny-sst2"], gpus=[0], slots="3").slot_plan() == [3]
    assert Plan(suites=["demo"], pairs=["1:tiny-sst2"], gpus=[0, 1], backend="slurm").slot_plan(cpu_count=64) == [1, 1]


def test_warm_start_is_on_by_default_and_only_its_opt_out_is_saved(tmp_path, configs):
    registry = SuiteRegistry(configs)
    base = {"suites": ["E4"], "pairs": ["1:glue-tvt_cola"], "gpus": "cpu"}
    for warm, saved in ((None, None), (False, False), (True, None)):
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump({**base, **({} if warm is None else {"warm_start": warm})}))
        plan = load_plan(path, registry)
        assert plan.warm_start is (warm is not False)
        assert yaml.safe_load(plan.to_yaml()).get("warm_start") is saved
    path.write_text(yaml.safe_dump({**base, "warm_start": "sometimes"}))
    with pytest.raises(PlanError, match="warm_start"):
        load_plan(path, registry)


def test_fuse_is_auto_by_default_round_trips_and_anything_else_is_refused(tmp_path, configs):
    from lat_core.contract.saved_plan import SavedPlan
    from lat_core.engine.fusion import fuses_on
    registry = SuiteRegistry(configs)
    base = {"suites": ["E4"], "pairs": ["1:glue-tvt_cola"], "gpus": "cpu"}
    # (as written, as loaded, groups on a GPU, groups on the CPU)
    for fuse, loaded, gpu, cpu in ((None, "auto", True, False), ("auto", "auto", True, False),
                                   (True, True, True, True), (False, False, False, False)):
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump({**base, **({} if fuse is None else {"fuse": fuse})}))
        plan = load_plan(path, registry)
        assert plan.fuse == loaded
        assert yaml.safe_load(plan.to_yaml())["fuse"] == loaded   # written even when false: a plan without it predates fusion
        again = SavedPlan.from_text(plan.to_yaml())
        assert (fuses_on(again, device_is_cpu=False), fuses_on(again, device_is_cpu=True)) == (gpu, cpu)
    assert not fuses_on(SavedPlan.from_text("{}"), device_is_cpu=False)   # saved before fuse was recorded: no groups, as then
    for bad in ("sometimes", 2, "gpu"):
        path.write_text(yaml.safe_dump({**base, "fuse": bad}))
        with pytest.raises(PlanError, match="fuse"):
            load_plan(path, registry)


def test_a_problem_many_entries_share_is_one_line_naming_a_few(tmp_path, configs):
    pairs = [f"-{seed}:glue-tvt_cola" for seed in range(1, 10_001)] + ["5:tiny-sst2", "6:nosuch", "7:nosuch"]
    with pytest.raises(PlanError) as info:
        load_plan(write_plan(tmp_path, with_(pairs=pairs)), SuiteRegistry(configs))
    assert info.value.problems == [
        "field 'pairs.seed': Input should be greater than or equal to 0 in 10,000 pairs: pairs[0].seed=-1, "
        "pairs[1].seed=-2, pairs[2].seed=-3 ... (9,997 more)"]
    with pytest.raises(PlanError) as info:
        load_plan(write_plan(tmp_path, with_(pairs=pairs[-3:])), SuiteRegistry(configs))
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith("field 'pairs': unknown dataset 'nosuch'")
    assert info.value.problems[0].endswith(" in 2 pairs: 6:nosuch, 7:nosuch")


@pytest.mark.parametrize("raw, expected", [
    (b"pairs: [" + b"x, " * (1024 * 1024) + b"]\n", "too large for a YAML file LAT reads (over 2 MiB)"),
    (b"[" * 5000, "not valid YAML: nested too deeply"),
    (b"countdown_minutes: 2026-13-45\n", "not valid YAML: month must be in 1..12"),
    (b"suites: !!timestamp x\n", "not valid YAML:"),
    (b"suites: [E4]\xff\n", "not UTF-8 text (byte 0xff at offset 12)"),
    (b"", "expected a mapping of plan fields, got an empty file"),
    (b"overrides: &o {a: *o}\n", "a value holds itself through an alias (*name), without end"),
    ("overrides:\n" + "".join(f"  a{i}: &a{i} [{f'*a{i - 1}, ' * 10 if i else 'x'}]\n" for i in range(8)),
     "its aliases (*name) expand it to more than 1,000,000 values"),
    ("overrides:\n" + "".join(f"  a{i}: &a{i} [{f'*a{i - 1}' if i else 'x'}]\n" for i in range(100)),
     "not valid YAML: nested too deeply (over 64 levels)"),
], ids=["huge", "deep", "bad-date", "bad-tag", "latin1", "empty", "alias-cycle", "alias-bomb", "alias-deep"])
def test_an_unreadable_plan_file_is_one_plan_error_naming_it(tmp_path, configs, raw, expected):
    path = tmp_path / "plan.yaml"
    path.write_bytes(raw if isinstance(raw, bytes) else raw.encode())
    with pytest.raises(PlanError) as info:
        load_plan(path, SuiteRegistry(configs))
    assert info.value.problems == [expected] or info.value.problems[0].startswith(expected), info.value.problems
    assert info.value.where == str(path)
