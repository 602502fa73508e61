"""The Mamba fast-path note: said for Mamba on CUDA without the kernels, never otherwise."""

import pytest

from lat_core.contract.jobdir import JobDir
from lat_core.train import models


def test_availability_follows_the_kernel_packages(monkeypatch):
    from transformers.models.mamba import modeling_mamba

    monkeypatch.delattr(modeling_mamba, "is_fast_path_available", raising=False)   # transformers 5.x
    assert models.mamba_fast_path_available(lambda m: True) is True
    assert models.mamba_fast_path_available(lambda m: m != "causal_conv1d") is False
    monkeypatch.setattr(modeling_mamba, "is_fast_path_available", False, raising=False)   # 4.x's own flag wins
    assert models.mamba_fast_path_available(lambda m: True) is False


def test_note_says_cost_and_install_command_only_where_it_applies():
    note = models.mamba_fast_path_note("mamba", "cuda", available=False)
    assert "slow pure-PyTorch path" in note and "several times slower" in note
    assert note.endswith("pip install mamba-ssm causal-conv1d")
    assert models.mamba_fast_path_note("mamba", "cuda", available=True) is None
    assert models.mamba_fast_path_note("mamba", "cpu", available=False) is None   # no kernels on the CPU anyway
    assert models.mamba_fast_path_note("gla", "cuda", available=False) is None


@pytest.mark.slow
def test_started_event_records_the_fast_path(tmp_path, monkeypatch):
    """A tiny Mamba job on the CPU: the started event says whether the kernels were usable, and no
    warning is logged (the CPU has no fast path to miss)."""

    import yaml

    from lat_core.train.__main__ import main

    cfg = yaml.safe_load(open(models.__file__.replace("lat_core/train/models.py",
                                                      "configs/experiments/mamba/tiny_lora.yaml")))
    cfg["train"].update(max_steps=1, eval_every=1, save_every=1)
    cfg["output_dir"] = str(tmp_path / "job")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    monkeypatch.setattr(models, "mamba_fast_path_available", lambda: False)
    assert main(["--cfg", str(tmp_path / "job.yaml")]) == 0
    started = JobDir(tmp_path / "job").read_events().events[0]
    assert started.mamba_fast_path is False and started.slow_path_warning is None


def _mamba_job(root, name: str, lr: float):
    import yaml

    raw = yaml.safe_load(open(models.__file__.replace("lat_core/train/models.py",
                                                      "configs/experiments/mamba/tiny_lora.yaml")))
    raw["name"] = name
    raw["train"].update(lr=lr, max_steps=2, eval_every=2, save_every=2, log_every=1)
    folder = root / name
    folder.mkdir(parents=True)
    raw["output_dir"] = str(folder)
    (folder / "job.yaml").write_text(yaml.safe_dump(raw))
    return folder


@pytest.mark.slow
def test_a_fused_member_says_its_mamba_kernels_as_a_job_alone_does(tmp_path, monkeypatch):
    """A member trains on its group's kernels: its started event and train.log say which, as a job
    alone's do (on an H200, 2026-11-27, a slow-path group's members said nothing of it)."""
    from lat_core.contract.jobdir import Started
    from lat_core.train.fused.__main__ import main as fused_main

    note = "Mamba fast path unavailable: (the note a job on CUDA logs)"
    monkeypatch.setattr(models, "mamba_fast_path_available", lambda: False)
    monkeypatch.setattr(models, "mamba_fast_path_note", lambda family, device, available: note)
    folders = [_mamba_job(tmp_path, "a", 2e-3), _mamba_job(tmp_path, "b", 1e-3)]
    assert fused_main(["--attempt", "1", *map(str, folders)]) == 0
    for folder in folders:
        started = JobDir(folder).read_events().of(Started)[0]
        assert started.fused_group == 2
        assert started.mamba_fast_path is False and started.slow_path_warning == note
        assert note in (folder / "train.log").read_text()
