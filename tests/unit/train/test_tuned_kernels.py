"""Kernel tunings (lat_core.train.tuned_kernels): what a tuning run chose is saved per GPU model and put
back into the kernels' autotuners, only as one of each kernel's own candidates.

Triton is not installed on the CPU test machine, so the autotuners here are stand-ins with the parts
of ``triton.runtime.autotuner.Autotuner`` the module reads (``base_fn``, ``configs``, ``cache``); the
real ones are exercised on a GPU (tests/gpu/test_kernel_warmup_gpu.py).
"""
from __future__ import annotations

import json

import pytest

from lat_core.train import tuned_kernels as tk


H200 = tk.Gpu("NVIDIA H200", "9.0", 132)
H100_SXM = tk.Gpu("NVIDIA H100 80GB HBM3", "9.0", 132)
H100_PCIE = tk.Gpu("NVIDIA H100 PCIe", "9.0", 114)
A100 = tk.Gpu("NVIDIA A100-SXM4-80GB", "8.0", 108)


class Config:  # the fields of triton.Config the table records
    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None):
        self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
        self.num_ctas, self.maxnreg = num_ctas, maxnreg


def chunk_kernel():  # a kernel function: the tuner's base_fn
    pass


class Tuner:
    def __init__(self, configs, fn=chunk_kernel):
        self.base_fn, self.configs, self.cache = fn, configs, {}


def candidates():
    return [Config({"BK": bk}, num_warps=w) for bk in (32, 64) for w in (2, 4)]


def test_gpu_file_names_follow_fla():
    assert tk.gpu_file_name("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB_HBM3.json"
    assert tk.gpu_file_name("NVIDIA H200") == "NVIDIA_H200.json"


def test_what_was_tuned_seeds_a_fresh_process_with_the_kernels_own_candidates(tmp_path):
    tuned = Tuner(candidates())
    key = (16, True, 256, "torch.bfloat16")
    tuned.cache[key] = tuned.configs[3]
    path = tmp_path / "GPU.json"
    tk.write_table(path, tk.tunings_of([tuned]), {"gpu": "GPU"})

    fresh = Tuner(candidates())  # a new process: new config objects, nothing tuned
    assert tk.seed([fresh], tk.read_table(path)) == 1
    assert fresh.cache[key] is fresh.configs[3]   # its own object (its pre-hooks), not a copy


def test_a_config_the_kernel_does_not_offer_is_not_seeded():
    kernels = {tk.kernel_id(Tuner([])): [{"key": [16], "config": tk.config_record(Config({"BK": 128}))}]}
    tuner = Tuner(candidates())
    assert tk.seed([tuner], kernels) == 0 and tuner.cache == {}


def test_a_key_tuned_in_this_process_is_kept():
    tuner = Tuner(candidates())
    tuner.cache[(16,)] = tuner.configs[0]
    kernels = {tk.kernel_id(tuner): [{"key": [16], "config": tk.config_record(tuner.configs[1])}]}
    assert tk.seed([tuner], kernels) == 0 and tuner.cache[(16,)] is tuner.configs[0]


def test_keys_that_would_not_read_back_equal_are_not_saved():
    tuner = Tuner(candidates())
    tuner.cache[(16, object())] = tuner.configs[0]
    assert tk.tunings_of([tuner]) == {}


def test_a_second_tuning_run_adds_keys_and_replaces_those_tuned_again():
    old = {"k": [{"key": [16], "config": {"a": 1}}, {"key": [32], "config": {"a": 2}}]}
    new = {"k": [{"key": [32], "config": {"a": 3}}], "j": [{"key": [1], "config": {}}]}
    out = tk.merged(old, new)
    assert out["k"] == [{"key": [16], "config": {"a": 1}}, {"key": [32], "config": {"a": 3}}]
    assert out["j"] == new["j"]


def test_switched_off_nothing_is_seeded(monkeypatch):
    monkeypatch.setenv(tk.SWITCH, "off")
    assert tk.seed_tuned_configs(out=lambda *a, **k: None) == 0


def test_without_triton_the_job_autotunes_and_says_so(monkeypatch):
    monkeypatch.delenv(tk.SWITCH, raising=False)
    monkeypatch.setattr(tk, "this_gpu", lambda: H200)
    lines = []
    monkeypatch.setattr(tk, "fla_autotuners", lambda: (_ for _ in ()).throw(ImportError("no triton")))
    assert tk.seed_tuned_configs(out=lambda line, **k: lines.append(line)) == 0
    assert "fla autotunes its kernels" in lines[0]


@pytest.mark.parametrize("path", sorted(tk.TUNINGS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_shipped_tables_read_back(path):
    data = json.loads(path.read_text())
    assert data["gpu"] and data["triton"] and data["kernels"]
    assert path.name == tk.gpu_file_name(data["gpu"])
    assert data["capability"] and data["sms"] > 0   # what lets a sibling GPU model use it (choose_table)
    for name, entries in tk.read_table(path).items():
        assert name.startswith("fla.")
        for entry in entries:
            assert set(entry["config"]) == {"kwargs", *tk.CONFIG_FIELDS}


def seeded_in_a_job(monkeypatch, tmp_path, environ, table_text=None):
    """(how many configs a job seeds into a tuner the table covers, the lines it logged), with
    ``environ``'s tuning variables and this GPU's table ``table_text`` in the folder the job reads."""
    for name in (tk.SWITCH, tk.DIR_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    tuner = Tuner(candidates())
    table = tmp_path / "GPU.json"
    if table_text is None:
        tk.write_table(table, {tk.kernel_id(tuner): [{"key": [16], "config": tk.config_record(tuner.configs[1])}]}, {})
    else:
        table.write_text(table_text)
    monkeypatch.setattr(tk, "this_gpu", lambda: tk.Gpu("GPU", "9.0", 132))  # no GPU here to ask
    monkeypatch.setattr(tk, "fla_autotuners", lambda: iter([tuner]))
    lines = []
    return tk.seed_tuned_configs(out=lambda line, **k: lines.append(line)), lines


def test_a_job_seeds_from_the_tables_folder(monkeypatch, tmp_path):
    assert seeded_in_a_job(monkeypatch, tmp_path, {tk.DIR_VARIABLE: str(tmp_path)})[0] == 1


@pytest.mark.parametrize("table_text, said", [
    ("{not json", "GPU.json: not a tuning table"),
    ('{"kernels": {"chunk_kernel": [{"key": 16, "config": {}}]}}', "GPU.json: kernel 'chunk_kernel': entry 0"),
    ('{"kernels": ["chunk_kernel"]}', "GPU.json: not a tuning table"),
])
def test_a_malformed_table_is_named_in_the_log_and_the_job_autotunes(monkeypatch, tmp_path, table_text, said):
    count, lines = seeded_in_a_job(monkeypatch, tmp_path, {tk.DIR_VARIABLE: str(tmp_path)}, table_text)
    assert count == 0 and said in lines[0] and "fla autotunes its kernels" in lines[0]


@pytest.mark.parametrize("environ, said", [
    ({tk.SWITCH: "of"}, "LAT_KERNEL_TUNINGS='of': expected off"),
    ({tk.DIR_VARIABLE: "relative/tables"}, "expected an absolute path"),
    ({tk.DIR_VARIABLE: "/nonexistent/lat-tables"}, "'/nonexistent/lat-tables': not a folder"),
])
def test_a_variable_the_job_cannot_use_is_named_in_the_log_and_the_job_autotunes(monkeypatch, tmp_path, environ,
                                                                                  said):
    """A plan's or shell's bad value is refused before the run; this one came with a job run by
    hand, or with an engine's own environment."""
    count, lines = seeded_in_a_job(monkeypatch, tmp_path, environ)
    assert count == 0 and said in lines[0] and "fla autotunes its kernels" in lines[0]


def table_of(folder, gpu: tk.Gpu, kernels=None):
    tk.write_table(folder / tk.gpu_file_name(gpu.name), kernels or {"fla.k": []}, gpu.facts())


def test_a_gpu_uses_its_own_table_first(tmp_path):
    table_of(tmp_path, H200)
    table_of(tmp_path, H100_SXM)
    chosen = tk.choose_table(H100_SXM, tmp_path)
    assert chosen == tk.Table(tmp_path / "NVIDIA_H100_80GB_HBM3.json")
    assert "no table" not in chosen.describe(H100_SXM)


def test_without_its_own_a_gpu_uses_a_siblings_table_and_says_whose(tmp_path):
    table_of(tmp_path, H200)
    chosen = tk.choose_table(H100_SXM, tmp_path)
    assert chosen == tk.Table(tmp_path / "NVIDIA_H200.json", sibling="NVIDIA H200")
    said = chosen.describe(H100_SXM)
    assert "NVIDIA H200's table" in said and "no table for NVIDIA H100 80GB HBM3" in said
    assert "--save-tunings" in said


@pytest.mark.parametrize("gpu", [H100_PCIE, A100], ids=["other SM count", "other capability"])
def test_a_gpu_unlike_every_table_autotunes(tmp_path, gpu):
    table_of(tmp_path, H200)
    (tmp_path / "notes.json").write_text("[1, 2]")   # not a table: skipped
    (tmp_path / "broken.json").write_text("{")
    assert tk.choose_table(gpu, tmp_path) is None


def test_an_h100_sxm_finds_the_shipped_h200_table():
    chosen = tk.choose_table(H100_SXM, tk.TUNINGS_DIR)
    assert chosen is not None and chosen.sibling == "NVIDIA H200"


def test_seeding_from_a_siblings_table_names_it(monkeypatch, tmp_path):
    tuner = Tuner(candidates())
    kernels = {tk.kernel_id(tuner): [{"key": [16], "config": tk.config_record(tuner.configs[2])}]}
    table_of(tmp_path, H200, kernels)
    monkeypatch.delenv(tk.SWITCH, raising=False)
    monkeypatch.setenv(tk.DIR_VARIABLE, str(tmp_path))
    monkeypatch.setattr(tk, "this_gpu", lambda: H100_SXM)
    monkeypatch.setattr(tk, "fla_autotuners", lambda: [tuner])
    lines = []
    assert tk.seed_tuned_configs(out=lambda line, **k: lines.append(line)) == 1
    assert tuner.cache[(16,)] is tuner.configs[2]
    assert "1 configs from NVIDIA H200's table" in lines[0] and "no table for NVIDIA H100 80GB HBM3" in lines[0]
