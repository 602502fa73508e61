"""On a CUDA machine, a fused group with fla's Triton kernels gives each member the loss curve the
single-job trainer gives it (the CPU tests pin fp32 equality on the pure-PyTorch path; here the
kernels and bf16 are the real ones, so the bound is the issue's 1e-2)."""
import pytest
import torch

from lat_core.train.fused.group import build_group
from tests.helpers.fused import run_alone, saved_tiny_base
from tests.unit.train.test_fused_group import member_cfgs, train_fused

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_group_matches_single_jobs_on_cuda(tmp_path, dtype):
    base = saved_tiny_base(tmp_path / "base")
    cfgs = member_cfgs(tmp_path / "fused", base)
    for c in cfgs:
        c.model.dtype = dtype
    fused = train_fused(build_group(cfgs, torch.device("cuda")))
    for cfg, curve in zip(member_cfgs(tmp_path / "alone", base), fused):
        cfg.model.dtype = dtype
        alone = run_alone(cfg)
        assert sorted(alone) == sorted(curve)
        for step, loss in alone.items():
            assert curve[step] == pytest.approx(loss, rel=1e-2), (cfg.name, step)
