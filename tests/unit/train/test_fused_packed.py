"""Packing a fused group's pass into one row (lat_core/train/fused/packed.py): when a group packs and
why not, and the layout its stacked layers see.  That packed members train as they do alone is in
test_fused_group (parametrised over packing)."""
import torch

from lat_core.train.fused.packed import packing_decision
from lat_core.train.fused.stacked import BatchLayout
from tests.helpers.fused import job_cfg


def test_a_group_packs_where_each_member_would_pack_alone(tmp_path):
    cfgs = [job_cfg(tmp_path, "x"), job_cfg(tmp_path, "y", train={"pack": False})]
    assert packing_decision(cfgs[:1], torch.device("cpu"), graphed=False) == \
        (True, "one row a pass, fla varlen (cu_seqlens)")
    on, why = packing_decision(cfgs, torch.device("cpu"), graphed=False)
    assert not on and why == "y: train.pack: false"
    on, why = packing_decision(cfgs[:1], torch.device("cuda"), graphed=True)
    assert not on and why.startswith("x: graphs on")
    on, why = packing_decision(cfgs[:1], torch.device("cuda"), graphed=False)   # auto: not on a GPU
    assert not on and why.startswith("x: auto: on cuda a packed step measured slower")
    cfgs[0].train.pack = True
    assert packing_decision(cfgs[:1], torch.device("cuda"), graphed=False)[0]
    cfgs[0].model.family = "mamba"
    on, why = packing_decision(cfgs[:1], torch.device("cpu"), graphed=False)
    assert not on and why == "x: mamba has no varlen path here"


def test_a_packed_row_has_one_run_of_tokens_per_member():
    layout = BatchLayout.packed([5, 0, 3], "cpu").for_tokens(8)
    assert layout.counts == [5, 0, 3] and layout.jobs.tolist() == [0, 2] and layout.width == 5
    assert layout.slots.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]   # member 2's 3 tokens from grid row 1
