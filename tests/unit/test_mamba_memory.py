"""Mamba's static memory prior against what was measured: the H200 slow-path figures and the CPU points."""

import json

import pytest

from lat_core.config import mamba_memory as MM
from lat_core.config import memory_prior as M
from lat_core.config.memory_prior import GiB, job_prior
from tests.unit.test_memory_prior import job_dir

LORA = {"method": "lora", "r": 8, "alpha": 16, "target_modules": ["in_proj", "x_proj"]}


def mamba_130m_job(tmp_path, max_seq_len: int, data: str = "glue-tvt_rte", **model) -> dict:
    """The mamba_lora suite's job (Mamba-130m, LoRA r8 in_proj/x_proj, 16 rows, bf16) from a local
    copy of the checkpoint's config.json; by default on sentence pairs, whose rows may fill
    max_seq_len (as the bench's synthetic 256-token rows did)."""
    folder = tmp_path / "mamba-130m-hf"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 768, "num_hidden_layers": 24,
                                                    "state_size": 16, "vocab_size": 50280, "expand": 2}))
    return {"model": {"family": "mamba", "name_or_path": str(folder), "dtype": "bfloat16", **model},
            "peft": LORA, "data": data, "train": {"batch_size": 16, "max_seq_len": max_seq_len}}


@pytest.fixture
def slow_path(monkeypatch):
    monkeypatch.setattr(M, "fast_path_expected", lambda: False)


def test_mamba_130m_parameter_count():
    shape = MM.mamba_shape({"hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280})
    assert abs(shape.param_count() - 129.1e6) / 129.1e6 < 0.01  # mamba-130m-hf's safetensors


def test_slow_path_prior_covers_the_h200_peaks_and_fits_three_jobs_not_four(tmp_path, slow_path):
    # H200, 256-token rows: the OOM listed slow-path processes of 39.7 GiB each.
    prior = job_prior(job_dir(tmp_path, mamba_130m_job(tmp_path, 256)), {}, environ={})
    assert 39.7 * GiB <= prior.gpu_bytes < 139 * GiB / 3
    # SST-2's short rows (~16 tokens padded to the batch's longest): 8 jobs peaked at 27.1 GiB in all.
    short = job_prior(job_dir(tmp_path, mamba_130m_job(tmp_path, 16), "short"), {}, environ={})
    assert 27.1 * GiB / 8 * 0.9 <= short.gpu_bytes <= 27.1 * GiB / 8 * 1.5
    # SST-2 itself at the suite's max_seq_len 256: sized at its longest rows (96 tokens), so 8 fit
    sst2 = job_prior(job_dir(tmp_path, mamba_130m_job(tmp_path, 256, data="glue-tvt_sst2"), "sst2"), {}, environ={})
    assert short.gpu_bytes < sst2.gpu_bytes < prior.gpu_bytes / 2 and 8 * sst2.gpu_bytes < 139 * GiB


def test_the_fast_path_is_far_smaller_and_the_cpu_always_slow(tmp_path, monkeypatch):
    folder = job_dir(tmp_path, mamba_130m_job(tmp_path, 256))
    monkeypatch.setattr(M, "fast_path_expected", lambda: False)
    slow = job_prior(folder, {}, environ={})
    monkeypatch.setattr(M, "fast_path_expected", lambda: True)
    fast = job_prior(folder, {}, environ={})
    assert fast.gpu_bytes < slow.gpu_bytes / 5
    assert fast.cpu_job_rss == slow.cpu_job_rss


def test_fast_path_needs_both_kernel_packages():
    assert MM.fast_path_expected(lambda name: object())
    assert not MM.fast_path_expected(lambda name: None if name == "causal_conv1d" else object())


# bench/bench_mamba_memory.py on this 2-core machine (bench/RESULTS.md): rows, seq, hidden, layers,
# state, dtype bytes -> the step's peak RSS growth in MiB.
CPU_POINTS = [((4, 64, 128, 2, 16, 4), 90.6), ((8, 64, 128, 2, 16, 4), 188.7), ((8, 128, 128, 2, 16, 4), 327.2),
              ((8, 128, 256, 2, 16, 4), 498.4), ((8, 128, 128, 4, 16, 4), 485.9), ((8, 128, 128, 2, 8, 4), 197.3),
              ((8, 128, 256, 4, 16, 2), 721.9), ((16, 128, 256, 4, 16, 2), 1407.7)]


@pytest.mark.parametrize(("point", "measured_mib"), CPU_POINTS)
def test_cpu_estimate_tracks_the_measured_steps(point, measured_mib):
    rows, seq, hidden, layers, state, dtype_bytes = point
    shape = MM.mamba_shape({"hidden_size": hidden, "num_hidden_layers": layers, "state_size": state,
                            "vocab_size": 1000, "tie_word_embeddings": False})
    acts = M.mamba_activations(shape, rows * seq, dtype_bytes, checkpointing=False)
    adapter = M.trainable_params(shape, M.PeftConfig(r=8, target_modules=["in_proj", "x_proj"])) * M.TRAINABLE_BYTES
    estimate_mib = (int((adapter + acts.cpu_scaled) * M.ALLOCATOR_FACTOR) + acts.cpu_counted) / 2**20
    assert 0.85 <= estimate_mib / measured_mib <= 1.4
