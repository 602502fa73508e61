"""The preflight's checks on typed job configs, against a described machine (no subprocess)."""

import json

import pytest

from lat_core.config.gpu_need import needs_gpu, params_from_name
from lat_core.config.hub_cache import dataset_cached, hub_unreachable
from lat_core.config.job import parse_config
from lat_core.config.memory_prior import GiB
from lat_core.contract.devices import Device
from lat_core.front.preflight import Job, PreflightError, Target, check
from lat_core.monitor.gpu import GpuInfo, GpuSnapshot

CPU = [Device("cpu", "CPU", 2)]
TINY = {"name": "t", "data": "tiny-sst2", "output_dir": "/tmp/x",
        "model": {"family": "gla", "name_or_path": "tiny-random", "tiny": {"hidden_size": 64}}}


def cfg(**changes):
    raw = json.loads(json.dumps(TINY))
    for dotted, value in changes.items():
        section, _, key = dotted.rpartition("__")
        (raw.setdefault(section, {}) if section else raw)[key] = value
    return parse_config(raw, environ={})


def target(devices=CPU, gpus=GpuSnapshot(()), ram=64 * GiB, allow_cpu=False):
    return Target(devices, gpus, ram, allow_cpu)


def problems(job_cfg, tgt=None, environ=None, probe=lambda env: None):
    try:
        check([Job("job1", job_cfg, environ or {})], tgt or target(), probe)
    except PreflightError as exc:
        return exc.problems
    return []


def gla_folder(tmp_path, hidden=2048, layers=24):
    folder = tmp_path / "gla"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": hidden, "num_hidden_layers": layers}))
    return str(folder)


def test_tiny_models_pass_on_the_cpu():
    assert problems(cfg()) == []
    assert problems(cfg(model__dtype="bfloat16")) == []


def test_a_big_model_on_the_cpu_is_refused_unless_allowed(tmp_path):
    big = cfg(model__name_or_path=gla_folder(tmp_path), model__dtype="bfloat16")
    found = problems(big, target(ram=1024 * GiB))  # sized from its config.json: fla's GLA-1.3B shape
    assert len(found) == 1 and "1.4 B parameters in bfloat16 need a GPU" in found[0] and "--allow-cpu" in found[0]
    assert found[0].endswith("[job job1]")
    assert problems(big, target(ram=1024 * GiB, allow_cpu=True)) == []


def test_the_gpu_rule_weighs_size_and_dtype():
    assert not needs_gpu(40_000_000, "float32") and needs_gpu(40_000_000, "bfloat16")
    assert needs_gpu(60_000_000, "float32") and not needs_gpu(5_000_000, "float16")
    assert params_from_name("fla-hub/gla-1.3B-100B") == 1_300_000_000
    assert params_from_name("state-spaces/mamba-130m-hf") == 130_000_000
    assert params_from_name("someone/my-model") is None


def test_offline_flags_refuse_a_hub_model_not_in_the_cache(tmp_path):
    hub_model = cfg(model__name_or_path="someone/my-model")
    environ = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    found = problems(hub_model, environ=environ)
    assert len(found) == 1 and "model someone/my-model" in found[0] and "HF_HUB_OFFLINE is set" in found[0]
    snapshot = tmp_path / "hf" / "hub" / "models--someone--my-model" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 1000}))
    assert problems(hub_model, environ=environ) == []  # cached: offline is fine


def test_an_unreachable_hub_refuses_a_hub_dataset_and_is_probed_once(tmp_path):
    asked = []
    probe = lambda env: asked.append(env) or "https://huggingface.co did not answer (refused)"  # noqa: E731
    environ = {"HF_HOME": str(tmp_path / "hf")}
    jobs = [Job(f"job{i}", cfg(data="glue-tvt_rte"), environ) for i in range(5)]
    with pytest.raises(PreflightError) as raised:
        check(jobs, target(), probe)
    (line,) = raised.value.problems
    assert "dataset glue-tvt_rte (nyu-mll/glue rte; a local copy: GLUE_LOCAL_DIR or data_dir)" in line
    assert "hub is unreachable" in line and "[jobs job0, job1, job2 ... (2 more)]" in line
    assert len(asked) == 1
    assert problems(cfg(data="glue-tvt_rte"), environ={**environ, "GLUE_LOCAL_DIR": str(tmp_path)}, probe=probe) == []


def test_the_datasets_cache_counts_as_local(tmp_path):
    environ = {"HF_DATASETS_CACHE": str(tmp_path / "ds")}
    assert not dataset_cached("nyu-mll/glue", "rte", environ)
    (tmp_path / "ds" / "nyu-mll___glue" / "rte").mkdir(parents=True)
    assert dataset_cached("nyu-mll/glue", "rte", environ) and not dataset_cached("nyu-mll/glue", "cola", environ)


def test_the_probe_says_why_a_closed_port_does_not_answer():
    assert "did not answer" in hub_unreachable({"HF_ENDPOINT": "http://127.0.0.1:9"}, timeout_s=2)


def test_a_peak_over_every_device_is_refused():
    huge = cfg(train__batch_size=512 * 43, train__max_seq_len=4096)   # SST-2 rows: sized at 96 tokens, not 4096
    found = problems(huge, target(ram=16 * GiB))
    assert len(found) == 1 and "is more than the host's RAM (16.0 GiB)" in found[0]
    gpus = GpuSnapshot((GpuInfo(0, "GPU-0", "H100", 0, 80 * GiB), GpuInfo(1, "GPU-1", "A10", 0, 24 * GiB)))
    on_gpus = [Device("gpu0", "GPU 0", 1, index=0), Device("gpu1", "GPU 1", 1, index=1)]
    found = problems(huge, target(on_gpus, gpus))
    assert len(found) == 1 and "more than the largest GPU of the run (80.0 GiB)" in found[0]
    assert problems(cfg(), target(on_gpus, gpus)) == []
