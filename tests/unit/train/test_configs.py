"""Every shipped experiment/spec parses; the tiny_adapters suite runs every adapter kind."""
from pathlib import Path

import pytest
import yaml

from lat_core.config.suites import SuiteRegistry
from lat_core.config.job import parse_config

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"
EXPERIMENTS = sorted((CONFIGS / "experiments").rglob("*.yaml"))
NEW_SUITES = ["gla_rank_sweep", "gla_targets", "gla_adapters", "mamba_lora", "mamba_sdlora", "tiny_adapters"]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: str(p.relative_to(CONFIGS / "experiments")))
def test_experiment_parses(path, tmp_path):
    raw = yaml.safe_load(path.read_text())
    cfg = parse_config({**raw, "data": raw.get("data", "tiny-sst2"), "output_dir": str(tmp_path)}, environ={})
    assert cfg.peft.target_modules and all(t.islower() or "." in t for t in cfg.peft.target_modules)


@pytest.mark.parametrize("name", NEW_SUITES)
def test_suite_loads(name):
    suite = SuiteRegistry(CONFIGS).get(name)
    assert all((CONFIGS / "experiments" / p).is_file() for cfgs in suite.rounds.values() for p in cfgs)


def test_tiny_adapters_suite_runs(tmp_path):
    from lat_core.contract.jobdir import JobDir
    from lat_core.train.loop import run
    suite = SuiteRegistry(CONFIGS).get("tiny_adapters")
    methods = set()
    for i, path in enumerate(p for cfgs in suite.rounds.values() for p in cfgs):
        raw = yaml.safe_load((CONFIGS / "experiments" / path).read_text())
        raw["train"].update(max_steps=2, eval_every=2, save_every=2)
        cfg = parse_config({**raw, "output_dir": str(tmp_path / str(i))}, environ={})
        with JobDir(cfg.output_dir).event_writer() as ev:
            done = run(cfg, ev, resume=False, argv=[])
        assert done.status == "ok" and done.steps == 2
        methods.add(cfg.peft.method)
    assert methods == {"lora", "dora", "rslora", "pissa", "loraga", "sdlora"}
