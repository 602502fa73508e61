"""On a CUDA machine, a fused group with fla's Triton kernels gives each member the loss curve the
single-job trainer gives it (the CPU tests pin fp32 equality on the pure-PyTorch path; here the
kernels and bf16 are the real ones, so the bound is the issue's 1e-2)."""
import pytest
import torch

from lat_core.train.fused.group import build_group
from tests.helpers.fused import run_alone, saved_tiny_base
from tests.unit.train.test_fused_group import member_cfgs, train_fused

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(autouse=True)
def fp32_matmul_precision():
    """A bf16 group sets TF32 for the process's fp32 matmuls (its own process in real runs): undone
    after each test, so the single-job runs of the next one see the default."""
    before = torch.backends.cuda.matmul.fp32_precision
    yield
    torch.backends.cuda.matmul.fp32_precision = before


def _on_cuda(cfg, dtype: str, packed: bool):
    cfg.model.dtype = dtype
    if packed:   # fla's varlen kernels: a packed pass (fused/packed.py) needs graphs off on a GPU
        cfg.train.pack, cfg.train.graphs = True, False
    return cfg


@pytest.mark.parametrize("dtype,packed", [("float32", False), ("bfloat16", False), ("bfloat16", True)])
def test_fused_group_matches_single_jobs_on_cuda(tmp_path, dtype, packed):
    base = saved_tiny_base(tmp_path / "base")
    cfgs = [_on_cuda(c, dtype, packed) for c in member_cfgs(tmp_path / "fused", base)]
    before = torch.backends.cuda.matmul.fp32_precision
    group = build_group(cfgs, torch.device("cuda"))
    assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if dtype == "bfloat16" else before)
    assert (group.packed is not None) == packed, group.modes.pack_why
    fused = train_fused(group, group.packed)
    torch.backends.cuda.matmul.fp32_precision = before   # the single jobs as they run: full fp32
    for cfg, curve in zip(member_cfgs(tmp_path / "alone", base), fused):
        alone = run_alone(_on_cuda(cfg, dtype, packed))
        assert sorted(alone) == sorted(curve)
        for step, loss in alone.items():
            assert curve[step] == pytest.approx(loss, rel=1e-2), (cfg.name, step)


def _graphed_folders(root, base, **over):
    from tests.integration.test_fused_runner import folders
    return folders(root, base, **{n: {"graphs": "auto", **over.get(n, {})} for n in "abc"})


def test_graphed_group_matches_the_eager_group_and_resumes(tmp_path):
    """The group's step replayed from CUDA graphs (fused/graphed.py): each member's losses equal the
    eager fused step's (fp32; fla's kernels in TF32 in both), graphs were captured and replayed (a
    member leaving changes the key), checkpoints hold the graphed optimizer's state and a member
    resumed from one continues the uninterrupted curve."""
    from lat_core.train.fused.__main__ import main
    from lat_core.contract.jobdir import Started, Step
    from tests.helpers.fused import events_of
    from tests.integration.test_fused_runner import folders
    base = saved_tiny_base(tmp_path / "base")
    constant = {"lr_scheduler": "constant"}   # a resumed run's schedule then does not depend on max_steps
    eager = folders(tmp_path / "eager", base, a=constant)
    graphed = _graphed_folders(tmp_path / "graphed", base, a=constant)
    assert main([str(d) for d in eager]) == 0 and main([str(d) for d in graphed]) == 0
    for e, g in zip(eager, graphed):
        assert events_of(g, Started)[0].graphs.on is True
        mine = {x.step: x.loss for x in events_of(g, Step)}
        theirs = {x.step: x.loss for x in events_of(e, Step)}
        assert sorted(mine) == sorted(theirs)
        for step, loss in theirs.items():
            assert mine[step] == pytest.approx(loss, rel=1e-3), (g.name, step)
    log = (graphed[0] / "train.log").read_text()
    assert "graphs: on for the group" in log
    part = _graphed_folders(tmp_path / "part", base, a={"max_steps": 3, **constant})
    assert main([str(d) for d in part]) == 0
    a = part[0]
    (a / "job.yaml").write_text((a / "job.yaml").read_text().replace("max_steps: 3", "max_steps: 6"))
    assert main(["--resume", str(a)]) == 0
    started = events_of(a, Started)[-1]
    assert started.resumed_from == 3 and started.optimizer_state == "restored"
    resumed = {x.step: x.loss for x in events_of(a, Step) if x.t >= started.t}
    whole = {x.step: x.loss for x in events_of(graphed[0], Step)}
    assert sorted(resumed) == [4, 5, 6]
    for step, loss in resumed.items():
        assert loss == pytest.approx(whole[step], rel=1e-4), step


def test_graphed_group_one_adamw_matches_an_adamw_per_member(tmp_path, monkeypatch):
    """The group's one AdamW step, captured (fused/group_adamw.py), against each member's own
    captured AdamW (LAT_FUSED_ONE_ADAMW=0): the same curves (fp32; only the optimizers differ)."""
    from lat_core.train.fused.group_adamw import SlicedAdamW
    base = saved_tiny_base(tmp_path / "base")
    curves = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("LAT_FUSED_ONE_ADAMW", switch)
        group = build_group(member_cfgs(tmp_path / switch, base, graphs="auto"), torch.device("cuda"))
        assert group.graphs is not None, group.modes.graphs_why
        assert all(isinstance(r.optimizer, SlicedAdamW) == (switch == "1") for r in group.runs)
        curves[switch] = train_fused(group, group.graphs)
    for one, own in zip(curves["1"], curves["0"]):
        assert sorted(one) == sorted(own)
        for step, loss in own.items():
            assert one[step] == pytest.approx(loss, rel=1e-4), step
