"""A sweep end to end: ``lat-tui --sweep`` on the CPU runs one real tiny trainer per point and pair,
each training the values its folder names."""

import json

import pytest
import yaml

from lat_tui.cli import main
from tests.integration.test_headless import configs  # noqa: F401  (fixture)


@pytest.mark.slow
def test_a_2x2_grid_runs_4_jobs_per_pair_each_with_its_values(tmp_path, configs, capsys):
    out = tmp_path / "runs"
    code = main(["--suite", "solo", "--pairs", "1:tiny-sst2", "--gpus", "cpu", "--gpu-plan", "2",
                 "--sweep", "train.lr=1e-3,2e-3", "--sweep", "peft.r=4,8", "--env", "HP_MAX_STEPS=4",
                 "--configs", str(configs), "--output-root", str(out), "--state-dir", str(tmp_path / "state")])
    text = capsys.readouterr().out
    assert code == 0 and "4/4 jobs succeeded" in text, text
    trainable = {}
    for lr, r in [("1e-3", 4), ("1e-3", 8), ("2e-3", 4), ("2e-3", 8)]:
        job_dir = out / "tiny-sst2_seed1" / f"tiny_lora__lr{lr}_r{r}"
        config = yaml.safe_load((job_dir / "job.yaml").read_text())
        assert (config["train"]["lr"], config["peft"]["r"], config["name"]) == (float(lr), r, job_dir.name)
        events = [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]
        assert events[0]["event"] == "started" and events[-1]["event"] == "finished"
        trainable[lr, r] = events[0]["trainable_params"]
    assert trainable["1e-3", 8] == 2 * trainable["1e-3", 4] == trainable["2e-3", 8]  # the rank each trained


@pytest.mark.slow
def test_a_two_stage_search_trains_stage_1_on_a_part_and_runs_its_best_point_with_every_seed(tmp_path, configs,
                                                                                            capsys):
    out = tmp_path / "runs"
    plan = {"suites": ["solo"], "pairs": ["1:tiny-sst2", "2:tiny-sst2"], "gpus": "cpu", "slots": 2,
            "env": {"HP_MAX_STEPS": "4"}, "output_root": str(out),
            "sweep": {"grid": {"train.lr": ["1e-4", "1e-3", "3e-3"]},
                      "stages": {"screen": {"train.data_fraction": 0.5, "train.max_steps": 2}, "promote": 1}}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    code = main(["--plan", str(tmp_path / "plan.yaml"), "--configs", str(configs),
                 "--state-dir", str(tmp_path / "state")])
    text = capsys.readouterr().out
    assert code == 0 and "5/9 jobs succeeded, 4 pruned by the sweep" in text, text
    screened = {}
    for lr in ("1e-4", "1e-3", "3e-3"):
        events = [json.loads(line) for line in
                  (out / "tiny-sst2_seed1" / f"tiny_lora__lr{lr}__screen" / "events.jsonl").read_text().splitlines()]
        full = [json.loads(line) for line in (out / "tiny-sst2_seed1" / f"tiny_lora__lr{lr}" / "events.jsonl")
                .read_text().splitlines()] if (out / "tiny-sst2_seed1" / f"tiny_lora__lr{lr}" / "events.jsonl").exists() else []
        assert events[0]["max_steps"] == 2 and events[-1]["event"] == "finished"
        screened[lr] = max(e["metrics"]["accuracy"] for e in events if e["event"] == "eval")
        if full:
            assert full[0]["train_examples"] == 2 * events[0]["train_examples"] and full[0]["max_steps"] == 4
    best = max(screened, key=lambda lr: (screened[lr], -list(screened).index(lr)))
    ran = {p.name for p in out.glob("tiny-sst2_seed*/*") if (p / "events.jsonl").exists() and "screen" not in p.name}
    assert ran == {f"tiny_lora__lr{best}"}, (screened, ran)
    assert len(list(out.glob(f"tiny-sst2_seed*/tiny_lora__lr{best}/events.jsonl"))) == 2  # both seeds
    # the results by sweep, from the journal's states and the folders' provenance: the promoted point's
    # two seeds in its row and the best, the others pruned, stage 1 apart
    from lat_tui.results_cli import main as results

    assert results([str(out), "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "results")]) == 0
    (sweep,) = json.loads((tmp_path / "results" / "results.json").read_text())["sweeps"]
    rows = {(row["stage"], row["values"]["train.lr"]): row for row in sweep["rows"]}
    for lr in screened:
        full, screen = rows["full", float(lr)], rows["screen", float(lr)]
        assert (screen["n"], screen["planned"], screen["best"]) == (1, 1, False)
        assert (full["n"], full["planned"], full["best"], full["not_in_mean"]) == (
            (2, 2, True, {}) if lr == best else (0, 2, False, {"pruned": 2}))
    assert "Sweep of tiny_lora on tiny-sst2" in capsys.readouterr().out
