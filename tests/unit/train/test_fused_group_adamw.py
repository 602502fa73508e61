"""One AdamW step for a fused group's members (lat_core/train/fused/group_adamw.py) against each
member's own torch.optim.AdamW given the same gradients (float32, CPU): different ranks, rates,
schedules, weight decay and clipping, members stepping at different times and one leaving midway;
a member's checkpoint state in a job alone's format, both ways."""
import math

import pytest
import torch
import torch.nn as nn

from lat_core.train.fused import members as M
from lat_core.train.fused.flat import FlatStacks, twin
from lat_core.train.fused.group_adamw import GroupAdamW, SlicedAdamW, one_adamw_decision

# three adapted modules (in, out) and each member's rank in each (0: not adapted), as install stacks them
MODULES = [(12, 12), (12, 20), (20, 12)]
RANKS = [[4, 4, 4], [8, 0, 8], [2, 2, 0]]
HYPER = [  # lr, weight decay, max_grad_norm, schedule (multiplier of the step)
    (2e-2, 0.0, 0.0, lambda n: 1.0),
    (5e-2, 0.1, 0.5, lambda n: min(1.0, (n + 1) / 3)),
    (1e-2, 0.01, 0.05, lambda n: max(0.0, 1 - n / 8)),
]


def _stacked(seed: int = 0) -> tuple[FlatStacks, list[M.Member]]:
    """Flat stacks with random true-rank weights (zero padding) and members whose parameters are
    views of them, as members.install makes them (A [r, in], B [out, r] the transposed Bt view)."""
    width = [max(max(r[k] for r in RANKS), 1) for k in range(len(MODULES))]
    shapes = [s for (n_in, n_out), w in zip(MODULES, width) for s in ((w, n_in), (w, n_out))]
    stacks = FlatStacks(shapes, len(RANKS), torch.float32, "cpu")
    weights, grads = stacks.views(stacks.weights), stacks.views(stacks.grads)
    gen = torch.Generator().manual_seed(seed)
    members = []
    for j, ranks in enumerate(RANKS):
        params = []
        for k, r in enumerate(ranks):
            if not r:
                continue
            for w, g in ((weights[2 * k], grads[2 * k]), (weights[2 * k + 1], grads[2 * k + 1])):
                w[j, :r] = torch.randn(w[j, :r].shape, generator=gen) * 0.5
                p = nn.Parameter(w.data[j, :r])
                p.grad = g[j, :r]
                params.append(p)
        params[1::2] = [_transposed(p) for p in params[1::2]]
        members.append(M.Member(j, params, stacks=stacks))
    return stacks, members


def _transposed(p: nn.Parameter) -> nn.Parameter:
    t = nn.Parameter(p.data.t())
    t.grad = p.grad.t()
    return t


def _sliced(group: GroupAdamW, members: list[M.Member]) -> list[SlicedAdamW]:
    """Each member's optimizer over its slice of the group's, not bound yet (a resume loads a
    state into it first)."""
    return [SlicedAdamW(group, m, lr=lr, weight_decay=wd, max_grad_norm=clip)
            for m, (lr, wd, clip, _) in zip(members, HYPER)]


def _schedules(opts: list) -> list:
    return [torch.optim.lr_scheduler.LambdaLR(o, fn) for o, (*_, fn) in zip(opts, HYPER)]


def _group(graphed: bool = False) -> tuple[FlatStacks, list[M.Member], GroupAdamW, list[SlicedAdamW], list]:
    stacks, members = _stacked()
    group = GroupAdamW(stacks, graphed)
    opts = _sliced(group, members)
    schedules = _schedules(opts)
    for o in opts:
        o.bind()
    return stacks, members, group, opts, schedules


def _alone(members: list[M.Member]) -> tuple[list[list[nn.Parameter]], list[torch.optim.AdamW]]:
    """Each member's parameters copied out, with its own torch AdamW."""
    params = [[nn.Parameter(p.detach().clone()) for p in m.params] for m in members]
    return params, [torch.optim.AdamW(ps, lr=lr, weight_decay=wd) for ps, (lr, wd, _, _) in zip(params, HYPER)]


def _grads(members, step: int) -> list[list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(1000 + step)
    return [[torch.randn(p.shape, generator=gen) * (j + 1) for p in m.params] for j, m in enumerate(members)]


def _give(members, grads, who) -> None:
    """Adds the gradients of the members ``who`` into the stacks' gradients (as a pass does)."""
    for j in who:
        for p, g in zip(members[j].params, grads[j]):
            p.grad.add_(g)


def _step_alone(j, params, opts, grads, schedules=None) -> None:
    """Member j's own step, its gradients ``grads`` (its parameters' in order); its schedule's too
    where it has one."""
    for p, g in zip(params[j], grads):
        p.grad = g.clone()
    clip = HYPER[j][2]
    if clip:
        torch.nn.utils.clip_grad_norm_(params[j], clip)
    opts[j].step()
    if schedules:
        schedules[j].step()
    opts[j].zero_grad()


def _same(a, b, rtol=1e-6):
    torch.testing.assert_close(a, b, rtol=rtol, atol=1e-7)


def test_group_steps_equal_each_members_own_adamw_with_one_leaving_midway():
    stacks, members, group, opts, schedules = _group()
    params, alone_opts = _alone(members)
    alone_schedules = _schedules(alone_opts)
    left_at = 4   # member 2 leaves after its 4th step; member 1 accumulates two passes a step
    pending, left = [None] * 3, None
    for n in range(8):
        grads = _grads(members, n)
        who = [j for j in range(3) if not (j == 2 and n >= left_at)]
        _give(members, grads, who)
        for j in who:
            pending[j] = grads[j] if pending[j] is None else [a + b for a, b in zip(pending[j], grads[j])]
        stepping = [j for j in who if j != 1 or n % 2 == 1]
        group.step(stepping)
        for j in stepping:
            opts[j].step()   # the group moved it; its step() checks that
            schedules[j].step()
            _step_alone(j, params, alone_opts, pending[j], alone_schedules)
            pending[j] = None
        assert torch.count_nonzero(stacks.grads[stepping]) == 0   # cleared after their step
        assert torch.count_nonzero(stacks.grads[1]) == (0 if 1 in stepping else stacks.grads[1].numel() - _padding(1))
        if n == left_at - 1:
            left = stacks.weights[2].clone(), group.exp_avg[2].clone(), group.exp_avg_sq[2].clone()
    for j, m in enumerate(members):
        for p, q in zip(m.params, params[j]):
            _same(p.detach(), q.detach())
        theirs = alone_opts[j].state_dict()["state"]
        ours = opts[j].state_dict()["state"]
        assert ours.keys() == theirs.keys()
        for k, st in ours.items():
            _same(st["exp_avg"], theirs[k]["exp_avg"])
            _same(st["exp_avg_sq"], theirs[k]["exp_avg_sq"])
            assert float(st["step"]) == float(theirs[k]["step"])
    assert group.steps.tolist() == [8, 4, left_at]
    for before, now in zip(left, (stacks.weights[2], group.exp_avg[2], group.exp_avg_sq[2])):
        assert torch.equal(before, now)   # the member that left did not move, nor did its state
    _assert_padding_zero(stacks)


def _padding(j: int) -> int:
    """Elements of member j's row that are padding (ranks below the stack's width)."""
    width = [max(max(r[k] for r in RANKS), 1) for k in range(len(MODULES))]
    return sum((w - RANKS[j][k]) * (n_in + n_out) for k, ((n_in, n_out), w) in enumerate(zip(MODULES, width)))


def _assert_padding_zero(stacks) -> None:
    for k, view in enumerate(stacks.views(stacks.weights)):
        for j, ranks in enumerate(RANKS):
            assert torch.count_nonzero(view[j, ranks[k // 2]:]) == 0


def test_a_member_that_does_not_step_keeps_even_non_finite_gradients_to_itself():
    stacks, members, group, opts, _ = _group()
    clean = _group()
    grads = _grads(members, 0)
    _give(members, grads, [0, 1])
    _give(clean[1], grads, [0, 1])
    for p in members[2].params:   # a failed member's gradients, left in the stacks
        p.grad.fill_(float("nan"))
    row = stacks.weights[2].clone()
    group.step([0, 1])
    clean[2].step([0, 1])
    assert torch.equal(stacks.weights[2], row) and torch.count_nonzero(group.exp_avg[2]) == 0
    assert torch.equal(stacks.weights[:2], clean[0].weights[:2])   # the others as without it
    assert group.steps.tolist() == [1, 1, 0]
    with pytest.raises(RuntimeError, match="steps with the group"):
        opts[2].step()   # not in the group's step: its own step() says so


def _continue(members, opts_or_group, params, alone_opts, steps: range) -> None:
    """Both sides on: the group (stepping every member) and each member's own AdamW."""
    group, opts = opts_or_group
    for n in steps:
        grads = _grads(members, n)
        _give(members, grads, range(3))
        group.step([0, 1, 2])
        for j in range(3):
            opts[j].step()
            _step_alone(j, params, alone_opts, grads[j])
    for m, ps in zip(members, params):
        for p, q in zip(m.params, ps):
            _same(p.detach(), q.detach())


def test_a_members_checkpoint_state_resumes_alone():
    """The state a member saves is a job alone's (keys, shapes, dense copies, float32 step, float
    rate) and a torch AdamW loaded from it goes on as the member does in the group."""
    stacks, members, group, opts, _ = _group()
    for n in range(3):
        _give(members, _grads(members, n), range(3))
        group.step([0, 1, 2])
    params, alone = _alone(members)
    for j, opt in enumerate(opts):
        saved = opt.state_dict()
        reference = torch.optim.AdamW([nn.Parameter(p.detach().clone()) for p in members[j].params])
        for p in reference.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        reference.step()   # a job alone's state after a step: the format to match
        fmt = reference.state_dict()
        assert saved["state"].keys() == fmt["state"].keys()
        for k, st in saved["state"].items():
            assert st.keys() == fmt["state"][k].keys()
            for key in ("exp_avg", "exp_avg_sq"):
                assert st[key].shape == fmt["state"][k][key].shape and st[key].is_contiguous()
                assert st[key].untyped_storage().nbytes() == st[key].numel() * 4   # a copy, not the group's buffer
            assert st["step"].dtype == torch.float32 and float(st["step"]) == 3
        assert isinstance(saved["param_groups"][0]["lr"], float)
        assert saved["param_groups"][0]["weight_decay"] == HYPER[j][1]
        alone[j].load_state_dict(saved)
    _continue(members, (group, opts), params, alone, range(3, 6))


def test_a_job_alones_checkpoint_state_resumes_in_the_group():
    stacks, members = _stacked()
    params, alone = _alone(members)
    for n in range(3):   # members 0 and 1 trained alone for 3 steps; member 2 starts fresh
        grads = _grads(members, n)
        for j in (0, 1):
            _step_alone(j, params, alone, grads[j])
    group = GroupAdamW(stacks, graphed=False)
    opts = _sliced(group, members)
    with torch.no_grad():
        for j in (0, 1):   # as a resume loads the checkpoint's adapter, then its optimizer state
            for p, q in zip(members[j].params, params[j]):
                p.copy_(q)
            opts[j].load_state_dict(alone[j].state_dict())
    for o in opts:
        o.bind()
    assert group.steps.tolist() == [3, 3, 0]
    _continue(members, (group, opts), params, alone, range(3, 6))


def test_the_switch_turns_the_group_optimizer_off(monkeypatch):
    on, line = one_adamw_decision(8)
    assert on and line == "optimizer: one AdamW step for the group's 8 members"
    monkeypatch.setenv("LAT_FUSED_ONE_ADAMW", "0")
    on, line = one_adamw_decision(8)
    assert not on and "LAT_FUSED_ONE_ADAMW=0" in line


def test_the_moments_of_a_member_are_its_row_of_the_group_buffers():
    stacks, members, group, opts, _ = _group()
    _give(members, _grads(members, 0), range(3))
    group.step([0, 1, 2])
    state = opts[1].state_dict()["state"]
    for k, p in enumerate(members[1].params):
        assert torch.equal(state[k]["exp_avg"], twin(group.exp_avg, p))
    assert math.isclose(float(group.lr[1]), HYPER[1][0] * HYPER[1][3](0))
