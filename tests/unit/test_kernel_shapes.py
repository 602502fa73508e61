"""The GPU kernel shapes a plan's jobs need (torch-free, as the engine and `lat-tui warmup` compute
them) and the files that carry them and the warm-up's phase between processes."""
from pathlib import Path

import yaml

from lat_core.config.job import parse_config
from lat_core.config.kernel_shapes import bucket_widths, shapes_for
from lat_core.contract.kernel_warmup import (KernelShape, WarmupPhase, read_phase, read_shapes, triton_cache_dir,
                                             widths_phrase, write_phase, write_shapes)

ROOT = Path(__file__).resolve().parents[2]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"
MAMBA = ROOT / "configs/experiments/mamba/tiny_lora.yaml"


def cfg(src=GLA, **train):
    raw = yaml.safe_load(src.read_text())
    raw.setdefault("train", {}).update(train)
    raw["output_dir"] = "/tmp/unused"
    return parse_config(raw, environ={})


def test_jobs_of_one_model_and_rows_share_a_shape_holding_every_width_they_use():
    shapes = shapes_for([cfg(max_seq_len=48, batch_size=8), cfg(max_seq_len=128, batch_size=8),
                         cfg(max_seq_len=48, batch_size=4), cfg(MAMBA)])
    assert [(s.family, s.rows, s.widths) for s in shapes] == [("gla", 8, (16, 32, 48, 64, 128)),
                                                              ("gla", 4, (16, 32, 48))]
    first = shapes[0]
    assert first.name_or_path == "tiny-random" and first.dtype == cfg().model.dtype
    assert dict(first.tiny) == cfg().model.tiny  # a tiny model's sizes decide its kernels


def test_a_checkpoint_shape_carries_no_tiny_sizes_and_its_dtype_splits_shapes():
    raw = {**yaml.safe_load(GLA.read_text()), "output_dir": "/tmp/unused"}
    raw["model"] = {**raw["model"], "name_or_path": "/models/gla-1.3b", "tiny": {}}
    bf16 = {**raw, "model": {**raw["model"], "dtype": "bfloat16"}}
    shapes = shapes_for([parse_config(raw, environ={}), parse_config(bf16, environ={})])
    assert [(s.name_or_path, s.tiny, s.dtype) for s in shapes] == [
        ("/models/gla-1.3b", (), raw["model"].get("dtype", "float32")), ("/models/gla-1.3b", (), "bfloat16")]


def test_bucket_widths_double_from_16_up_to_max_seq_len():
    assert bucket_widths(48) == [16, 32, 48]
    assert bucket_widths(256) == [16, 32, 64, 128, 256]


def test_shapes_and_phases_round_trip_through_their_files(tmp_path):
    shapes = shapes_for([cfg(max_seq_len=64)])
    write_shapes(tmp_path / "s.json", shapes, {"TRITON_CACHE_DIR": "/c", "CUDA_VISIBLE_DEVICES": "GPU-1", "HOME": "/h"})
    # only what decides where kernels compile and are cached travels with them
    assert read_shapes(tmp_path / "s.json") == (shapes, {"TRITON_CACHE_DIR": "/c", "CUDA_VISIBLE_DEVICES": "GPU-1"})
    phase = WarmupPhase("compiling", (16, 32, 64))
    write_phase(tmp_path / "p.json", phase)
    assert read_phase(tmp_path / "p.json") == phase
    assert read_phase(tmp_path / "none.json") is None


def test_a_shapes_file_that_is_no_list_of_shapes_is_named(tmp_path):
    (tmp_path / "s.json").write_text('{"family": "gla"}')
    try:
        read_shapes(tmp_path / "s.json")
    except ValueError as exc:
        assert str(tmp_path / "s.json") in str(exc)
    else:
        raise AssertionError("no error")


def test_what_the_user_reads_about_the_warm_up():
    assert widths_phrase([64, 16, 32]) == "16-, 32-, 64-token rows"
    assert widths_phrase([256]) == "256-token rows"
    compiling = WarmupPhase("compiling", (16, 32, 64))
    assert compiling.waiting_reason() == "compiling GPU kernels for 16-, 32-, 64-token rows (first run on this machine)"
    assert WarmupPhase("done", (16,), 41.2).job_line() == "kernels: warmed in the preload process in 41 s"
    assert WarmupPhase("done", (16,), 2.0, cached=True).job_line().startswith("kernels: cached")
    assert "not warmed (boom)" in WarmupPhase("failed", why="boom").job_line()


def test_jobs_and_warm_up_share_the_users_triton_cache_unless_told_otherwise():
    assert triton_cache_dir({}) == Path("~/.triton/cache").expanduser()
    assert triton_cache_dir({"TRITON_CACHE_DIR": "/fast/triton"}) == Path("/fast/triton")


def test_a_shape_describes_itself():
    shape = KernelShape("gla", "tiny-random", (), "float32", False, 8, (16,))
    assert shape.describe() == "gla tiny-random float32, 8 rows"


def test_jobs_whose_steps_are_not_graphed_get_a_shape_of_their_own_warmed_on_unpadded_rows(tmp_path):
    """Eager steps train on rows fla unpads (int32 cu_seqlens), whose kernels autotune under keys of
    their own: a dropout, DoRA or train.graphs: false job must not find only a graphed step's warmed."""
    graphed, dropout, off = cfg(max_seq_len=32), cfg(max_seq_len=32), cfg(max_seq_len=32, graphs=False)
    dropout.peft.dropout = 0.05
    shapes = shapes_for([graphed, dropout, off])
    assert [(s.rows, s.widths, s.eager) for s in shapes] == [(8, (16, 32), False), (8, (16, 32), True)]
    assert shapes[1].describe().endswith(", eager")
    write_shapes(tmp_path / "s.json", shapes)
    assert read_shapes(tmp_path / "s.json")[0] == shapes


def test_a_shapes_file_from_before_eager_shapes_reads_as_graphed(tmp_path):
    old = {"family": "gla", "name_or_path": "tiny-random", "tiny": {}, "dtype": "float32", "fused_swiglu": False,
           "rows": 8, "widths": [16]}
    assert KernelShape.from_json(old).eager is False
