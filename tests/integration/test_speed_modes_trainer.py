"""The trainer on the CPU with the speed modes' defaults: graphs off with the reason in the started
event, packing on (fla varlen through the CPU path) with the losses of the padded trainer."""
import pytest

from lat_core.contract.jobdir import SpeedMode, Step
from lat_core.train import evaluation
from tests.integration.test_trainer_features import cfg_for, losses, train


def test_packed_training_equals_padded(tmp_path, monkeypatch):
    calls = []
    real = evaluation.packed_loss
    monkeypatch.setattr(evaluation, "packed_loss", lambda model, batch, *rest: calls.append(1) or real(model, batch, *rest))
    over = {"train": {"batch_size": 4, "grad_accum": 2}}
    padded = train(cfg_for(tmp_path / "padded", train={**over["train"], "pack": False}))
    assert not calls
    packed = train(cfg_for(tmp_path / "packed", **over))
    assert len(calls) == 6 * 2   # every micro-batch of the packed run
    started = packed[0]
    assert started.pack == SpeedMode("auto", True, started.pack.why)
    assert started.graphs.setting == "auto" and started.graphs.on is False   # the default; the CPU
    assert started.graphs.why.startswith("CUDA graphs need a GPU")
    assert padded[0].pack.why == "train.pack: false"
    a, b = losses(padded), losses(packed)
    assert a.keys() == b.keys() and len(a) == 6
    for s in a:
        assert b[s] == pytest.approx(a[s], rel=1e-5)
    tokens = [sum(e.tokens for e in evs if isinstance(e, Step)) for evs in (padded, packed)]
    assert tokens[0] == tokens[1] > 0
