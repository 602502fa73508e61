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
