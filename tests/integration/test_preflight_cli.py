"""The preflight through the real front end: ``lat-tui --plan`` in a subprocess refuses a run that
cannot work with exit 2, every problem listed, and nothing in the journal or the output root."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.contract.state_dir import JOURNAL_NAME
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
TINY_GLA = yaml.safe_load((ROOT / "configs" / "experiments" / "gla" / "tiny_lora_qkvo.yaml").read_text())


@pytest.fixture
def configs(tmp_path) -> Path:
    """Suites of one experiment each: a GLA-1.3B-shaped local model in bf16, a hub model, the tiny one."""
    root = tmp_path / "configs"
    (root / "experiments" / "gla").mkdir(parents=True)
    (root / "suites").mkdir()
    big = tmp_path / "gla13b"
    big.mkdir()
    (big / "config.json").write_text(json.dumps({"hidden_size": 2048, "num_hidden_layers": 24}))
    models = {"big": {"name_or_path": str(big), "dtype": "bfloat16"},
              "hub": {"name_or_path": "someone/my-model"}, "tiny": {}}
    for name, model in models.items():
        config = {**TINY_GLA, "name": name, "model": {**TINY_GLA["model"], **model}}
        if model:
            config["model"].pop("tiny")
        (root / "experiments" / "gla" / f"{name}.yaml").write_text(yaml.safe_dump(config))
        (root / "suites" / f"{name}.yaml").write_text(yaml.safe_dump({"rounds": {1: [f"gla/{name}.yaml"]}}))
    return root


def run_plan(tmp_path, configs, suite, pairs, env=None, flags=()):
    plan = {"suites": [suite], "pairs": pairs, "gpus": "cpu", "output_root": str(tmp_path / "runs"), "env": env or {}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    shell = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}  # a closed port
    shell.pop("HF_HUB_OFFLINE", None)
    shell.pop("HF_DATASETS_OFFLINE", None)
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", "--plan", str(tmp_path / "plan.yaml"),
                           "--configs", str(configs), "--state-dir", str(tmp_path / "state"), *flags],
                          capture_output=True, text=True, env=shell, timeout=HANG_S)


def assert_refused(tmp_path, done):
    assert done.returncode == 2, done.stdout + done.stderr
    assert "The run cannot work: preflight" in done.stderr
    assert not (tmp_path / "state" / JOURNAL_NAME).exists()
    assert not (tmp_path / "runs").exists()


def test_a_big_model_on_the_cpu_is_refused_and_allow_cpu_says_so(tmp_path, configs):
    done = run_plan(tmp_path, configs, "big", ["1:tiny-sst2", "2:tiny-sst2"])
    assert_refused(tmp_path, done)
    assert "parameters in bfloat16 need a GPU, and the run is on the CPU" in done.stderr
    assert "--allow-cpu" in done.stderr and "[jobs tiny-sst2_seed1/big, tiny-sst2_seed2/big]" in done.stderr
    saved = tmp_path / "saved.yaml"
    done = run_plan(tmp_path, configs, "big", ["1:tiny-sst2"], flags=("--allow-cpu", "--save-plan", str(saved)))
    assert done.returncode == 0 and yaml.safe_load(saved.read_text())["allow_cpu"] is True


def test_offline_flags_refuse_a_model_that_is_not_cached(tmp_path, configs):
    done = run_plan(tmp_path, configs, "hub", ["1:tiny-sst2"], env={"HF_HUB_OFFLINE": "1"})
    assert_refused(tmp_path, done)
    assert "model someone/my-model" in done.stderr and "HF_HUB_OFFLINE is set" in done.stderr


def test_an_unreachable_hub_refuses_every_thing_it_would_serve(tmp_path, configs):
    done = run_plan(tmp_path, configs, "hub", ["1:glue-tvt_rte"])
    assert_refused(tmp_path, done)
    lines = [line for line in done.stderr.splitlines() if "the hub is unreachable: http://127.0.0.1:9" in line]
    assert len(lines) == 2  # the model and the dataset, each named
    assert any("model someone/my-model" in line for line in lines)
    assert any("dataset glue-tvt_rte (nyu-mll/glue rte" in line for line in lines)


def test_a_peak_over_the_hosts_ram_is_refused(tmp_path, configs):
    overrides = yaml.safe_load((configs / "experiments" / "gla" / "tiny.yaml").read_text())
    overrides["train"].update(batch_size=4096, max_seq_len=65536)
    (configs / "experiments" / "gla" / "tiny.yaml").write_text(yaml.safe_dump(overrides))
    done = run_plan(tmp_path, configs, "tiny", ["1:tiny-sst2"])
    assert_refused(tmp_path, done)
    assert "is more than the host's RAM" in done.stderr


def test_pretraining_without_a_gpu_is_refused_before_torch_is_imported(tmp_path):
    """The dual-GPU runbook's command on a machine without a GPU: the 85.6 M model is refused, exit 2."""
    code = ("import sys; from lat_core.train.pretrain import main; "
            "rc = main(['--config=configs/dual_gpu/conservative.py', '--corpus=missing.txt']); "
            "print(rc, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert "85.6 M parameters in bfloat16 need a GPU, and no GPU is visible" in done.stderr
    assert "--allow-cpu" in done.stderr and "corpus missing.txt: no such file" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_allow_cpu_lets_a_pretraining_preset_through_the_preflight():
    from lat_core.train.pretrain_config import build_config, preflight

    cfg = build_config("conservative", [], environ={})
    assert cfg.param_count() == 85_574_400
    assert preflight(cfg, gpu_visible=False, allow_cpu=True) == [] and preflight(cfg, True, False) == []
    assert preflight(build_config("conservative", ["--depth=1"], environ={}), False, False) == []
