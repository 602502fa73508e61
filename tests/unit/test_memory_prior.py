"""The static memory prior: parameter counts, calibration bounds, model lookup, unknowns are None."""

import json
import math
import struct
from pathlib import Path

import pytest
import yaml

from lat_core.config import memory_prior as M
from lat_core.config.memory_prior import GiB, gla_shape, job_prior

ROOT = Path(__file__).resolve().parents[2]
BENCH_CFG = ROOT / "bench" / "configs" / "gla13b_random_lora_r8.yaml"
TINY_CFG = ROOT / "configs" / "experiments" / "gla" / "tiny_lora_qkvo.yaml"
QKVO = ["q_proj", "k_proj", "v_proj", "o_proj"]


def job_dir(tmp_path: Path, cfg: dict | Path, name: str = "job") -> Path:
    """A job directory holding ``cfg`` as its job.yaml, as the engine writes it."""
    raw = yaml.safe_load(cfg.read_text()) if isinstance(cfg, Path) else cfg
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.yaml").write_text(yaml.safe_dump({**raw, "output_dir": str(folder)}))
    return folder


def gla_job(model: dict, **train) -> dict:
    return {"model": {"family": "gla", "dtype": "bfloat16", **model},
            "peft": {"method": "lora", "r": 8, "target_modules": QKVO}, "data": "glue-tvt_rte",
            "train": {"batch_size": 4, "max_seq_len": 256, **train}}


def write_safetensors(path: Path, tensors: dict[str, list[int]], dtype: str = "BF16") -> None:
    """A valid safetensors file of zeros: little-endian header length, JSON header, data."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))


def test_gla_13b_parameter_count_matches_the_measured_architecture():
    shape = gla_shape({})  # fla's GLAConfig defaults are the 1.3B shape
    peft = M.PeftConfig(r=8, target_modules=QKVO)
    total = shape.param_count() + M.trainable_params(shape, peft)
    assert abs(total - 1.368e9) / 1.368e9 < 0.03


def test_bench_config_prior_covers_its_measured_peak_without_being_absurd(tmp_path):
    bench = {**yaml.safe_load(BENCH_CFG.read_text()), "data": "glue-tvt_rte"}  # its rows: random, all 256 tokens
    prior = job_prior(job_dir(tmp_path, bench), {}, environ={})
    measured_nvml_floor = 4.7 * GiB + 0.5 * GiB  # torch's peak on an H200 plus a CUDA context
    assert measured_nvml_floor <= prior.gpu_bytes < 2 * measured_nvml_floor
    assert prior.gpu_job_rss == M.GPU_JOB_BASE_RSS  # random weights initialise on the GPU


def test_activation_bytes_reproduce_the_calibration_points():
    shape = gla_shape({})
    static = shape.param_count() * 2 + M.trainable_params(shape, M.PeftConfig(r=8, target_modules=QKVO)) * 16
    for batch, ckpt, measured_gib in ((4, False, 4.7), (64, False, 34.8), (4, True, 3.1)):
        allocated = static + M.activation_bytes(shape, batch * 256, 2, ckpt)
        assert measured_gib <= allocated / GiB < measured_gib * 1.15, (batch, ckpt, allocated / GiB)


def test_env_overrides_change_the_prior_as_they_change_the_trainer(tmp_path):
    folder = job_dir(tmp_path, BENCH_CFG)
    plain = job_prior(folder, {}, environ={}).gpu_bytes
    assert job_prior(folder, {"GRADIENT_CHECKPOINTING": "1"}, environ={}).gpu_bytes < plain
    assert job_prior(folder, {"HP_BATCH_SIZE": "8"}, environ={}).gpu_bytes > plain
    assert job_prior(folder, {}, environ={"HP_BATCH_SIZE": "8"}).gpu_bytes > plain  # the engine's own env


def test_single_sentence_rows_are_sized_at_their_longest_not_at_max_seq_len(tmp_path):
    tiny = {"name_or_path": "tiny-random", "tiny": {"hidden_size": 512, "num_hidden_layers": 4, "num_heads": 4}}
    pairs = job_prior(job_dir(tmp_path, gla_job(tiny), "a"), {}, environ={}).gpu_bytes
    sst2 = job_prior(job_dir(tmp_path, {**gla_job(tiny), "data": "tiny-sst2"}, "b"), {}, environ={}).gpu_bytes
    short = job_prior(job_dir(tmp_path, {**gla_job(tiny, max_seq_len=M.SINGLE_SENTENCE_MAX_TOKENS)}, "c"), {},
                      environ={}).gpu_bytes
    assert sst2 == short < pairs


def test_prior_grows_with_batch_and_sequence(tmp_path):
    tiny = {"name_or_path": "tiny-random", "tiny": {"hidden_size": 512, "num_hidden_layers": 4, "num_heads": 4}}
    small = job_prior(job_dir(tmp_path, gla_job(tiny), "a"), {}, environ={}).gpu_bytes
    longer = job_prior(job_dir(tmp_path, gla_job(tiny, max_seq_len=512), "b"), {}, environ={}).gpu_bytes
    wider = job_prior(job_dir(tmp_path, gla_job(tiny, batch_size=8), "c"), {}, environ={}).gpu_bytes
    assert small < longer and small < wider


def test_local_model_dir_counts_the_parameters_its_safetensors_hold(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gla", "hidden_size": 64, "num_hidden_layers": 2,
                                                   "num_heads": 2, "vocab_size": 1000, "torch_dtype": "bfloat16"}))
    write_safetensors(model / "model-00001-of-00002.safetensors", {"a": [1000, 1000]})
    write_safetensors(model / "model-00002-of-00002.safetensors", {"b": [500, 1000], "c": [7]})
    cfg = M.parse_config(gla_job({"name_or_path": str(model)}), environ={}, cfg_path=tmp_path / "job.yaml")
    facts = M.model_facts(cfg, {})
    assert facts.params == 1_500_007 and facts.pretrained
    prior = job_prior(job_dir(tmp_path, gla_job({"name_or_path": str(model)})), {}, environ={})
    assert prior.gpu_job_rss == M.GPU_JOB_BASE_RSS + 1_500_007 * 2  # from_pretrained loads via host RAM


def test_local_model_dir_without_safetensors_counts_its_architecture(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2,
                                                   "vocab_size": 500}))
    cfg = M.parse_config(gla_job({"name_or_path": str(model)}), environ={}, cfg_path=tmp_path / "job.yaml")
    assert M.model_facts(cfg, {}).params == 198_592  # fla's GLAForCausalLM with these sizes


def test_hub_id_is_found_in_the_hf_cache_layout(tmp_path):
    snapshot = tmp_path / "hf" / "hub" / "models--fla-hub--gla-1.3B-100B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"hidden_size": 2048, "num_hidden_layers": 24}))
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    folder = job_dir(tmp_path, ROOT / "configs" / "experiments" / "gla13b" / "rank" / "lora_qkvo_r8_a16.yaml")
    assert job_prior(folder, {}, environ={"HF_HOME": str(tmp_path / "empty")}) is None  # not cached there
    cached = job_prior(folder, {"HF_HOME": str(tmp_path / "hf")}, environ={})
    assert cached is not None and cached.gpu_job_rss > M.GPU_JOB_BASE_RSS
    assert M.cached_snapshot("fla-hub/gla-1.3B-100B", {"HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}) == snapshot


@pytest.mark.parametrize("change", [
    {"model": {"family": "mamba", "name_or_path": "tiny-random", "dtype": "float32"},
     "peft": {"method": "sdlora", "target_modules": ["in_proj"]}},
    {"peft": {"method": "dora", "target_modules": QKVO}},
    {"peft": {"method": "lora", "target_modules": ["no_such_proj"]}},
    {"model": {"family": "gla", "name_or_path": "/no/such/model", "dtype": "bfloat16"}},
    {"model": {"family": "gla", "name_or_path": "org/not-cached", "dtype": "bfloat16"}},
    {"train": {"batch_size": "four"}},
], ids=["mamba-sdlora", "dora", "unknown-target", "missing-dir", "hub-not-cached", "invalid-config"])
def test_what_the_prior_does_not_model_is_unknown(tmp_path, change):
    raw = {**gla_job({"name_or_path": "tiny-random"}), **change}
    assert job_prior(job_dir(tmp_path, raw), {}, environ={"HF_HOME": str(tmp_path / "empty")}) is None


def test_malformed_files_give_none_not_an_error(tmp_path):
    assert job_prior(tmp_path / "absent", {}, environ={}) is None
    bad_yaml = tmp_path / "bad"
    bad_yaml.mkdir()
    (bad_yaml / "job.yaml").write_text("model: [unclosed\n")
    assert job_prior(bad_yaml, {}, environ={}) is None
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    assert job_prior(job_dir(tmp_path, gla_job({"name_or_path": str(model)}), "j1"), {}, environ={}) is None
    (model / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2}))
    (model / "model.safetensors").write_bytes(b"\xff" * 16)
    assert job_prior(job_dir(tmp_path, gla_job({"name_or_path": str(model)}), "j2"), {}, environ={}) is None


def test_cpu_job_rss_covers_the_measured_tiny_job(tmp_path):
    prior = job_prior(job_dir(tmp_path, TINY_CFG), {}, environ={})
    assert 588 * 2**20 <= prior.cpu_job_rss < 2 * GiB  # 588 MiB measured (see CPU_JOB_BASE_RSS)
    assert prior.peak(on_cpu=True) == (0, prior.cpu_job_rss)
    assert prior.peak(on_cpu=False) == (prior.gpu_bytes, prior.gpu_job_rss)


def test_every_shipped_gla_experiment_gets_a_prior_or_a_reason_for_none(tmp_path):
    for path in sorted((ROOT / "configs" / "experiments" / "gla").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        prior = job_prior(job_dir(tmp_path, raw, path.stem), {}, environ={})
        dora = "dora" in path.stem
        assert (prior is None) == dora, path.name
