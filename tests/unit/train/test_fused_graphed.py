"""The graphed fused step's layout (lat_core/train/fused/graphed.py) on the CPU: static shapes (each
member's rows fixed, one bucket width, no attention mask: graphs.PadKeyMask keeps the padding out of
GLA's state) give every member the losses of the eager fused step, with members of different batch
sizes, accumulation and lengths and one leaving early.  The capture itself needs CUDA
(tests/gpu/test_fused_gpu.py)."""
import pytest
import torch

from lat_core.train.fused.graphed import FusedGraphs, graphs_decision, static_fused_batch
from lat_core.train.fused.group import build_group
from tests.helpers.fused import job_cfg, saved_tiny_base
from tests.unit.train.test_fused_group import member_cfgs, train_fused


def test_static_step_gives_the_eager_fused_losses(tmp_path):
    base = saved_tiny_base(tmp_path / "base")
    eager = train_fused(build_group(member_cfgs(tmp_path / "eager", base), torch.device("cpu")))
    group = build_group(member_cfgs(tmp_path / "static", base), torch.device("cpu"))
    assert group.graphs is None   # train.graphs is opt-in, and this is the CPU
    graphs = FusedGraphs(group, capture_graphs=False)
    static = train_fused(group, graphs)
    assert [len(c) for c in static] == [6, 6, 4]
    for name, a, b in zip("abc", eager, static):
        assert sorted(a) == sorted(b)
        for step in a:
            assert b[step] == pytest.approx(a[step], rel=1e-5), (name, step)


def test_static_batch_pads_each_member_to_its_rows_and_scores_no_pad_row():
    ex = [{"input_ids": [5] * n, "label": 0} for n in (3, 17, 9)]
    parts = [(0, ex[:2], [7, 8]), (2, ex[2:], [9])]
    host = static_fused_batch(parts, rows=[2, 4, 3], widths=[16, 32, 48], pad_id=1)
    assert host["key"] == (32, (2, 0, 3)) and host["rows"] == [2, 0, 3]
    assert host["input_ids"].shape == (5, 32)
    assert host["target"].tolist() == [7, 8, 9, -100, -100]
    assert host["row_job"].tolist() == [0, 0, 2, 2, 2]
    assert host["attention_mask"].sum(1).tolist() == [3, 17, 9, 0, 0]
    assert host["input_ids"][0, -3:].tolist() == [5, 5, 5] and host["input_ids"][0, 0] == 1   # left padding


def test_graphs_decision_names_the_member_that_keeps_the_group_eager(tmp_path):
    cfgs = [job_cfg(tmp_path, "x", train={"graphs": "auto"}), job_cfg(tmp_path, "y", train={"graphs": False})]
    on, why = graphs_decision(cfgs, torch.device("cuda"))
    assert not on and why.startswith("y: train.graphs: false")
    on, why = graphs_decision(cfgs[:1], torch.device("cpu"))
    assert not on and why.startswith("x: CUDA graphs need a GPU")
    cfgs[0].peft.dropout = 0.1
    on, why = graphs_decision(cfgs[:1], torch.device("cuda"))
    assert not on and "dropout" in why
    cfgs[0].peft.dropout = 0.0
    on, why = graphs_decision(cfgs[:1], torch.device("cuda"))
    assert on and why.startswith("static widths 16,")
