"""Pretraining presets: the seeds' numbers, accumulation arithmetic, overrides winning over presets."""

import pytest

from lat_core.train.pretrain_config import PretrainConfigError, build_config, load_preset


@pytest.mark.parametrize("name,depth,dev,total,seq,accum1,accum2", [
    ("conservative", 12, 8, 24576, 1536, 2, 1),
    ("balanced", 16, 12, 49152, 2048, 2, 1),
    ("aggressive", 20, 14, 86016, 3072, 2, 1),
])
def test_presets_and_accumulation(name, depth, dev, total, seq, accum1, accum2):
    cfg = build_config(name, [])
    assert (cfg.depth, cfg.device_batch_size, cfg.total_batch_size, cfg.seq_len) == (depth, dev, total, seq)
    assert cfg.grad_accum(1) == accum1 and cfg.grad_accum(2) == accum2


def test_non_dividing_total_shows_the_arithmetic():
    cfg = build_config("balanced", ["--device_batch_size=5"])
    with pytest.raises(PretrainConfigError) as info:
        cfg.grad_accum(2)
    assert str(info.value) == ("total_batch_size 49152 is not a multiple of device_batch_size 5 x seq_len 2048 "
                               "x world 2 = 20480 (49152 / 20480 = 2.400)")


def test_command_line_overrides_win():
    cfg = build_config("conservative", ["--device_batch_size=16", "--total_batch_size=49152",
                                        "--num_iterations=50", "--eval_every", "25"])
    assert (cfg.device_batch_size, cfg.total_batch_size, cfg.num_iterations, cfg.eval_every) == (16, 49152, 50, 25)
    assert cfg.depth == 12  # untouched preset field
    assert cfg.grad_accum(2) == 1


@pytest.mark.parametrize("args,message", [
    (["--batch=3"], "unknown option --batch"),
    (["--depth=deep"], "--depth='deep': expected int"),
    (["--num_iterations=0"], "num_iterations must be positive"),
])
def test_bad_overrides(args, message):
    with pytest.raises(PretrainConfigError) as info:
        build_config("conservative", args)
    assert message in str(info.value)


def test_unknown_preset_lists_known():
    with pytest.raises(PretrainConfigError) as info:
        load_preset("reckless")
    assert "aggressive, balanced, conservative" in str(info.value)
