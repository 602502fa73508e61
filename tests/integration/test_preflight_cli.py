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
from lat_core.front.preflight import PreflightError
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
    assert "--allow-cpu" in done.stderr and "[jobs gla/big 1:tiny-sst2, gla/big 2:tiny-sst2]" in done.stderr
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


# ----------------------------------------------------------------------------- rerun and add

def lat(tmp_path, *args, env=None):
    """A ``lat-tui`` verb in a subprocess, with a closed hub and an empty cache (as run_plan)."""
    shell = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9", **(env or {}),
             "PYTHONPATH": str(ROOT)}
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if name not in (env or {}):
            shell.pop(name, None)
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", *args, "--state-dir", str(tmp_path / "state")],
                          capture_output=True, text=True, env=shell, timeout=HANG_S)


def job_folder(tmp_path, configs, name):
    """A finished job's folder as the planner leaves it: the experiment's resolved job.yaml."""
    job = tmp_path / "runs" / "tiny-sst2_seed1" / name
    job.mkdir(parents=True)
    cfg = yaml.safe_load((configs / "experiments" / "gla" / f"{name}.yaml").read_text())
    cfg.update(seed=1, data="tiny-sst2", output_dir=str(job), resolved=True)
    (job / "job.yaml").write_text(yaml.safe_dump(cfg))
    return job


def shrink_big_model(tmp_path):
    """The big model cut to ~30 M parameters: still too big for the CPU in bf16, small enough for any
    host's RAM, so --allow-cpu is all it takes."""
    (tmp_path / "gla13b" / "config.json").write_text(json.dumps({"hidden_size": 512, "num_hidden_layers": 4}))


def test_a_rerun_goes_through_the_preflight(tmp_path, configs):
    big = job_folder(tmp_path, configs, "big")
    done = lat(tmp_path, "rerun", str(big), "--gpus", "cpu", "--output-root", str(tmp_path / "again"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "The run cannot work: preflight" in done.stderr and "need a GPU, and the run is on the CPU" in done.stderr
    hub = job_folder(tmp_path, configs, "hub")
    done = lat(tmp_path, "rerun", str(hub), "--gpus", "cpu", "--output-root", str(tmp_path / "again"),
               env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "model someone/my-model" in done.stderr and "HF_HUB_OFFLINE is set" in done.stderr
    assert not (tmp_path / "state" / JOURNAL_NAME).exists() and not (tmp_path / "again").exists()
    from lat_core.front.rerun import prepare_rerun

    shrink_big_model(tmp_path)
    with pytest.raises(PreflightError, match="need a GPU"):
        prepare_rerun(big, tmp_path / "again", "cpu", {})
    prepared, _ = prepare_rerun(big, tmp_path / "again", "cpu", {}, allow_cpu=True)
    assert prepared.plan.allow_cpu and not (tmp_path / "again").exists()


def test_jobs_added_to_a_live_run_go_through_the_preflight(tmp_path, configs):
    from lat_core.front.client import Client, plan_from_mapping, suite_registry

    registry = suite_registry(configs)
    plan = plan_from_mapping({"suites": ["tiny"], "pairs": ["1:tiny-sst2"], "gpus": "cpu", "countdown_minutes": 60,
                              "output_root": str(tmp_path / "runs"), "configs": str(configs)}, registry, where="test")
    client = Client(tmp_path / "state")
    run, _ = client.new_run(plan, registry=registry)   # queued behind its countdown; no engine started
    done = lat(tmp_path, "add", "--suite", "big", "--suite", "hub", "--pairs", "1:tiny-sst2 2:tiny-sst2",
               "--configs", str(configs), env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "The run cannot work: preflight" in done.stderr
    assert "[jobs gla/big 1:tiny-sst2, gla/big 2:tiny-sst2]" in done.stderr  # every problem, each job named
    assert "model someone/my-model" in done.stderr and "HF_HUB_OFFLINE is set" in done.stderr
    assert [j.key for j in client.jobs(run.id)] == ["tiny-sst2_seed1/tiny"]
    assert not (tmp_path / "runs" / "tiny-sst2_seed1" / "big").exists() and not client.engine_alive()
    shrink_big_model(tmp_path)
    added = client.jobs_to_add(run, ["big"], "all", "1:tiny-sst2", registry, allow_cpu=True)
    assert [job["key"] for job in added] == ["tiny-sst2_seed1/big"]
