"""On a CUDA machine: the graphed trainer (train.graphs auto) trains tiny GLA with the losses of the
eager trainer, captures one graph per width, and resumes exactly; packing matches too."""
import pytest
import torch

from lat_core.contract.jobdir.events import Eval
from tests.integration.test_trainer_features import cfg_for, losses, train

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
pytest.importorskip("fla")

# graphs are opt-in (train.graphs auto); widths 16 and 32 of max_seq_len 32 both occur in tiny-sst2:
# 12 steps capture both and replay them
OVER = {"train": {"graphs": "auto", "max_steps": 12, "max_seq_len": 32, "save_every": 6, "eval_every": 6, "grad_accum": 2,
                  "batch_size": 4, "warmup_steps": 3}}


def _run(tmp, name, resume=False, **train_over):
    over = {"train": {**OVER["train"], **train_over}}
    return train(cfg_for(tmp / name, **over), resume=resume)


def _close(a: dict, b: dict, rel: float):
    assert a.keys() == b.keys()
    for s in a:
        assert b[s] == pytest.approx(a[s], rel=rel), (s, a, b)


def test_graphed_matches_eager_and_packed(tmp_path, capfd):
    eager = _run(tmp_path, "eager", graphs=False, pack=False)
    graphed = _run(tmp_path, "graphed")
    packed = _run(tmp_path, "packed", graphs=False, pack=True)
    out = capfd.readouterr().out
    assert graphed[0].graphs.on and not graphed[0].pack.on
    assert not eager[0].graphs.on and eager[0].graphs.why == "train.graphs: false"
    assert packed[0].pack.on and not packed[0].graphs.on
    assert "graphs: captured the training step at width" in out
    _close(losses(eager), losses(graphed), 1e-3)
    _close(losses(eager), losses(packed), 1e-3)
    evals = {name: [e.metrics["loss"] for e in evs if isinstance(e, Eval)]
             for name, evs in (("eager", eager), ("graphed", graphed))}
    assert evals["graphed"] == pytest.approx(evals["eager"], rel=1e-3)


def test_graphed_resume_equals_uninterrupted(tmp_path):
    full = losses(_run(tmp_path, "full"))
    _run(tmp_path, "part", max_steps=6)
    resumed = _run(tmp_path, "part", resume=True)
    got = losses(resumed, after=6)
    assert sorted(got) == list(range(7, 13))
    for s in got:
        assert got[s] == pytest.approx(full[s], rel=1e-5)


def test_eager_resumes_a_graphed_checkpoint(tmp_path):
    full = losses(_run(tmp_path, "full"))
    _run(tmp_path, "part", max_steps=6)
    got = losses(_run(tmp_path, "part", resume=True, graphs=False, pack=False), after=6)
    for s in got:
        assert got[s] == pytest.approx(full[s], rel=1e-3)
