"""One AdamW step for every member of a fused group (issue 26 item 4).

Each member used to step its own AdamW over its own slices of the stacks: 8 members of GLA-1.3B,
some fifteen foreach ops each over a few hundred small tensors, were 17.8 ms of a 59 ms graphed
step (bench/RESULTS.md, 2026-11-26).  GroupAdamW steps the group's flat buffers (fused.flat: member
j's weights, gradients and moments are row j of one [jobs, P] tensor each) with a dozen
elementwise kernels, each member's hyperparameters a column broadcast along its row:

- its own learning rate (a device vector its schedule fills in place: each member's AdamW has a
  0-d view of its entry as its rate), weight decay, betas, eps and step count (bias correction);
- per-member gradient clipping (max_grad_norm > 0: its norm over its own row, as the Trainer
  clips a job alone over its parameters; 0: none, every member today, hf_trainer's max_grad_norm);
- only the members named in step() move: a member mid-accumulation, or one that has left the
  group (finished, failed, cancelled), keeps its weights, moments and step count, bit for bit
  (its gradients are masked out before they meet anything, so even non-finite ones stay apart);
- no host reads: a graphed group captures the step (the first runs eagerly) and replays it, the
  members that step a device mask copied from one made once per set of members.

A member's checkpoint keeps its own optimizer state in a job alone's format: SlicedAdamW is the
member's torch AdamW (its parameter group, which its schedule sets; state_dict and
load_state_dict), its state read from and written to its row of the group's buffers, so a member
resumes alone from it and a job alone's checkpoint resumes in a group.

Switch: LAT_FUSED_ONE_ADAMW=0 gives each member its own AdamW again (step.new_optimizer).
"""
from __future__ import annotations

import os
from collections import defaultdict

import torch

from ..graphs import capture
from .flat import FlatStacks, twin

SWITCH_ENV = "LAT_FUSED_ONE_ADAMW"


def one_adamw_decision(n_members: int) -> tuple[bool, str]:
    """(on, the line a member's train.log gets): one AdamW for the group unless the switch is 0."""
    if os.environ.get(SWITCH_ENV, "1").strip() == "0":
        return False, f"optimizer: each member its own AdamW ({SWITCH_ENV}=0)"
    return True, f"optimizer: one AdamW step for the group's {n_members} members"


class GroupAdamW:
    """AdamW over the group's flat buffers; per-member hyperparameters set by bind (SlicedAdamW)."""

    def __init__(self, stacks: FlatStacks, graphed: bool):
        self.stacks, self.graphed = stacks, graphed
        w = stacks.weights
        n = w.shape[0]
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(w), torch.zeros_like(w)

        def vector(value: float = 0.0) -> torch.Tensor:   # float64: see _update
            return torch.full((n,), value, dtype=torch.float64, device=w.device)
        self.steps, self.lr, self.weight_decay, self.max_grad_norm = vector(), vector(), vector(), vector()
        self.beta1, self.beta2, self.eps = vector(0.9), vector(0.999), vector(1e-8)
        self.clips = False                 # any member clips (a host fact: the clipping kernels are left out)
        self.stepping = torch.zeros(n, 1, dtype=torch.bool, device=w.device)
        self._masks: dict[tuple[int, ...], torch.Tensor] = {}
        self.stepped: frozenset[int] = frozenset()   # the members of the last step (SlicedAdamW.step checks)
        self._graph = None
        self._warm = False

    def bind(self, j: int, param_group: dict, max_grad_norm: float) -> None:
        """Member j's hyperparameters from its AdamW's parameter group (after its checkpoint and
        schedule), and its rate from then on: param_group["lr"] becomes a 0-d view of the group's
        vector, which the schedule fills in place (torch's schedulers fill a tensor rate)."""
        lr = param_group["lr"]
        self.lr[j] = float(lr)
        param_group["lr"] = self.lr[j]
        beta1, beta2 = param_group["betas"]
        for vec, value in ((self.weight_decay, param_group["weight_decay"]), (self.beta1, beta1),
                           (self.beta2, beta2), (self.eps, param_group["eps"]), (self.max_grad_norm, max_grad_norm)):
            vec[j] = float(value)
        self.clips = self.clips or max_grad_norm > 0

    def step(self, members: list[int]) -> None:
        """One AdamW step of the given members (indices in the stacks); the others do not move.
        Their gradients are cleared after (in place: the stacks' gradients are views of them)."""
        self.stepped = frozenset(members)
        self.stepping.copy_(self._mask(members))
        if not self.graphed:
            self._update()
        elif self._graph is not None:
            self._graph.replay()
        elif not self._warm:   # as graphs.GraphedAdamW: the first step eagerly, the second captured
            self._warm = True
            self._update()
        else:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            self._graph, _ = capture(self._update, None, stream)
            torch.cuda.current_stream().wait_stream(stream)

    def _mask(self, members: list[int]) -> torch.Tensor:
        key = tuple(sorted(members))
        if key not in self._masks:
            mask = torch.zeros_like(self.stepping, device="cpu")
            mask[list(key)] = True
            self._masks[key] = mask.to(self.stepping.device)
        return self._masks[key]

    def _update(self) -> None:
        """AdamW (decoupled weight decay, bias-corrected moments) on the stepping rows, in the order
        of torch's foreach AdamW (torch.optim.adam._multi_tensor_adam).  Why the per-member vectors
        are float64: torch computes its coefficients (1 - beta2, lr / bias correction) in Python
        floats and its kernels round them to float32 once; so do these columns (col), which keeps
        the group's step equal to each member's own AdamW to float32 rounding."""
        w, s = self.stacks.weights, self.stepping
        on = s[:, 0].to(torch.float64)                         # 1 for a stepping member
        self.steps.add_(on)
        t = self.steps.clamp(min=1)                             # a member never stepped: finite, unused
        bias1, bias2_sqrt = 1 - self.beta1 ** t, (1 - self.beta2 ** t).sqrt()
        g = torch.where(s, self.stacks.grads, 0)                # the others' gradients never enter
        if self.clips:
            g.mul_(_clip_coefficients(g, self.max_grad_norm)[:, None])
        w.mul_(col(1 - self.lr * self.weight_decay * on))
        self.exp_avg.lerp_(g, col((1 - self.beta1) * on))
        self.exp_avg_sq.mul_(col(torch.where(s[:, 0], self.beta2, 1.0))).addcmul_(g * col(1 - self.beta2), g)
        denom = self.exp_avg_sq.sqrt().div_(col(bias2_sqrt)).add_(col(self.eps))
        update = torch.div(self.exp_avg, denom, out=denom)
        w.addcmul_(update, col(-(self.lr / bias1) * on))
        self.stacks.grads.masked_fill_(s, 0)


def col(v: torch.Tensor) -> torch.Tensor:
    """A per-member coefficient as a float32 column, broadcast along each member's row."""
    return v.to(torch.float32)[:, None]


def _clip_coefficients(g: torch.Tensor, max_norm: torch.Tensor) -> torch.Tensor:
    """Each row's factor as torch.nn.utils.clip_grad_norm_ makes it for that member alone (max_norm
    over 1e-6 more than its gradients' total norm, at most 1); 1 where max_norm is 0."""
    norm = torch.linalg.vector_norm(g, dim=1, dtype=torch.float32)
    limit = max_norm.to(torch.float32)
    return torch.where(limit > 0, (limit / (norm + 1e-6)).clamp(max=1.0), 1.0)


class SlicedAdamW(torch.optim.AdamW):
    """A member's AdamW as a job alone has it: its one parameter group (lr, betas, eps, weight
    decay; its schedule sets the rate), state_dict and load_state_dict in a job alone's format.
    Its state lives in its row of the group's buffers, and GroupAdamW steps it with the others."""

    def __init__(self, group: GroupAdamW, member, lr: float, weight_decay: float, max_grad_norm: float = 0.0):
        super().__init__([{"params": member.params, "weight_decay": weight_decay}], lr=lr,
                         weight_decay=weight_decay, capturable=group.graphed, foreach=True)
        self.group, self.index, self.max_grad_norm = group, member.index, max_grad_norm

    clears_grads = True   # the group clears the gradients of the members it steps

    def step(self, closure=None):
        """Nothing left to do: the group's step for all members that step (GroupAdamW.step, before
        each one's step and schedule) moved this one; raises where it did not include it."""
        if closure is not None or self.index not in self.group.stepped:
            raise RuntimeError("a member of a group optimizer steps with the group: GroupAdamW.step first")

    def bind(self) -> None:
        """After its checkpoint is restored and its schedule built: its hyperparameters and rate to
        the group (GroupAdamW.bind)."""
        self.group.bind(self.index, self.param_groups[0], self.max_grad_norm)

    def _params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    def state_dict(self) -> dict:
        """As the member's own AdamW would give it: per parameter its step and moments (copies,
        dense, in the parameter's shape), none before its first step; the rate a float (eager) or a
        device tensor (graphed), as graphs.set_optimizer_mode leaves a job alone's."""
        g = self.group
        step = g.steps[self.index].to(torch.float32)   # a job alone's step counter is float32
        if float(step) > 0:
            if not g.graphed:
                step = step.cpu()
            for p in self._params():
                self.state[p] = {"step": step.clone(),
                                 "exp_avg": twin(g.exp_avg, p).clone(memory_format=torch.contiguous_format),
                                 "exp_avg_sq": twin(g.exp_avg_sq, p).clone(memory_format=torch.contiguous_format)}
        try:
            out = super().state_dict()
        finally:
            self.state = defaultdict(dict)
        for group in out["param_groups"]:
            group["lr"] = group["lr"].clone() if g.graphed else float(group["lr"])
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        """A member's or a job alone's saved state into the member's row of the group's buffers."""
        super().load_state_dict(state_dict)
        g = self.group
        with torch.no_grad():
            for p in self._params():
                state = self.state.get(p)
                if state:
                    twin(g.exp_avg, p).copy_(state["exp_avg"])
                    twin(g.exp_avg_sq, p).copy_(state["exp_avg_sq"])
                    g.steps[self.index] = float(state["step"])
        self.state = defaultdict(dict)
        for group in self.param_groups:
            group["capturable"] = g.graphed
