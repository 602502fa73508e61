"""One fused pass: every training member adds its next micro-batch (or, when the rows are short, every
micro-batch left in its optimizer step: folds), one forward and backward run over all rows, and
each member whose gradient accumulation completes steps its own optimizer.

What makes a member's step equal its step alone: its micro-batches come from the same seeded
sampler (data.MicroBatchSampler) from its own resume step; its loss is its label-token cross
entropy summed over its rows and divided by the scored tokens of its whole step, as
LatTrainer.compute_loss does (so a folded step sums the same terms in one pass); gradients of
its A/B depend only on its own rows; its optimizer is AdamW over its own parameters with its own
hyperparameters and state (one step for all members, group_adamw.GroupAdamW, or its own AdamW), its
schedule a LambdaLR built as a single job builds it (hf_trainer.build_scheduler), with no gradient
clipping (max_grad_norm 0 there too).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .. import data as D
from . import members as M
from .group_adamw import GroupAdamW, SlicedAdamW, one_adamw_decision
from .stacked import BatchLayout, LayoutSlot


@dataclass
class MemberRun:
    """A member's training state: config, data, optimizer, schedule, where it is in its step."""
    cfg: object
    member: M.Member
    train_ex: list[dict]
    label_ids: list[int]
    optimizer: torch.optim.Optimizer | None   # None: a member that failed before it started (group.failed)
    scheduler: object
    step: int = 0                                   # optimizer steps done
    window: list[tuple] = field(default_factory=list)   # (examples, counts) of micro-batches left in this step
    window_scored: int = 1                          # scored tokens of this whole step
    step_loss: torch.Tensor | None = None           # this step's loss so far (on the device)
    step_tokens: int = 0                            # non-padding tokens since the last step event
    done: bool = False
    _micro: object = None

    def start(self, start_step: int) -> None:
        tr = self.cfg.train
        self.step = start_step
        self._micro = iter(D.MicroBatchSampler(len(self.train_ex), tr.batch_size, tr.grad_accum, self.cfg.seed,
                                               start_step, tr.max_steps))
        self.done = start_step >= tr.max_steps

    def open_window(self) -> list[tuple]:
        """The micro-batches left in this optimizer step; opens the next step's window when empty."""
        if not self.window:
            micro = [[self.train_ex[i] for i in next(self._micro)] for _ in range(self.cfg.train.grad_accum)]
            self.window = [(ex, _counts(ex)) for ex in micro]
            self.window_scored = max(1, sum(c["n_scored"] for _, c in self.window))
        return self.window

    def take(self, whole: bool) -> tuple[list[dict], dict, int]:
        """(examples, host counts, micro-batches taken): the next micro-batch, or with ``whole`` every
        micro-batch left in the window (the step's accumulation folded into one pass)."""
        window = self.open_window()
        taken = window[:] if whole else window[:1]
        del window[:len(taken)]
        examples = [e for ex, _ in taken for e in ex]
        counts = {k: sum(c[k] for _, c in taken) for k in ("n_tokens", "n_scored")}
        return examples, counts, len(taken)

    def closes_step(self) -> bool:
        return not self.window

    def optimizer_step(self) -> None:
        """The member's AdamW step (a member of a group optimizer was stepped with the group:
        step_members) and schedule step; its gradient slices cleared in place."""
        self.optimizer.step()
        self.scheduler.step()
        if not getattr(self.optimizer, "clears_grads", False):
            M.zero_member_grads(self.member)
        self.step += 1
        self.done = self.step >= self.cfg.train.max_steps


def _counts(examples: list[dict]) -> dict:
    """A classification micro-batch's host counts, as data.TrainCollate makes them (the tensors are
    collated once, for the whole fused batch): non-padding tokens and scored tokens (one a row)."""
    return {"n_tokens": sum(len(e["input_ids"]) for e in examples), "n_scored": len(examples)}


def new_group_optimizer(members: list[M.Member], graphed: bool) -> tuple[GroupAdamW | None, str]:
    """(the group's one AdamW, or None where each member steps its own; the line saying which)."""
    on, why = one_adamw_decision(len(members))
    return (GroupAdamW(members[0].stacks, graphed) if on and members else None), why


def new_optimizer(cfg, member: M.Member, graphed: bool = False, group: GroupAdamW | None = None) -> torch.optim.Optimizer:
    """AdamW as a single job makes it (loop.run): one group, the job's lr and weight decay (no
    clipping: hf_trainer's max_grad_norm 0).  With ``group``, a SlicedAdamW the group steps; else
    its own, graphed: its step (and the clearing of the member's gradients) a captured graph."""
    from .graphed import MemberAdamW
    tr = cfg.train
    if group is not None:
        return SlicedAdamW(group, member, lr=tr.lr, weight_decay=tr.weight_decay)
    return (MemberAdamW if graphed else torch.optim.AdamW)(
        [{"params": member.params, "weight_decay": tr.weight_decay}], lr=tr.lr, weight_decay=tr.weight_decay)


def start_optimizer(optimizer: torch.optim.Optimizer, graphed: bool, device) -> None:
    """After its schedule is built (and its checkpoint restored): a member of the group optimizer
    hands it its rate and hyperparameters (SlicedAdamW.bind); its own AdamW takes the mode's rate
    and step counters (graphs.set_optimizer_mode: a restore may come from the other mode)."""
    from ..graphs import set_optimizer_mode
    if isinstance(optimizer, SlicedAdamW):
        optimizer.bind()
    else:
        set_optimizer_mode(optimizer, graphed, device)


def fused_batch(parts: list[tuple[int, list[dict], list[int]]], pad_id: int, n_jobs: int, device) -> dict:
    """One left-padded batch of every member's micro-batch, rows in member order.

    parts: (member index, examples, each example's label token) in ascending member order.  Adds `row_job`
    (member of each row) and `target` (the label token of each row)."""
    examples = [e for _, ex, _ in parts for e in ex]
    batch = D.collate(examples, pad_id)
    rows = [0] * n_jobs
    for j, ex, _ in parts:
        rows[j] = len(ex)
    batch["row_job"] = torch.tensor([j for j, ex, _ in parts for _ in ex])
    batch["target"] = torch.tensor([t for _, _, targets in parts for t in targets])
    out = {k: v.to(device) for k, v in batch.items()}
    out["layout"] = BatchLayout(rows, batch["attention_mask"], device)
    return out


def row_losses(model, batch) -> torch.Tensor:
    """The label-token cross entropy of each row (only the two last positions' logits computed)."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    keep = {"logits_to_keep": 2} if ids.shape[1] > 2 else {}
    logits = model(input_ids=ids, attention_mask=mask, **keep).logits
    return F.cross_entropy(logits[:, -2].float(), batch["target"], reduction="none")


@dataclass
class Pass:
    """What one forward and backward trains: each member's rows, in member order."""
    parts: list[tuple[int, list[dict], list[int]]]   # (member index, examples, label tokens)
    active: list[tuple[int, MemberRun]]              # (member index, run) of the members in it
    broken: list[tuple[MemberRun, BaseException]]    # members whose micro-batch could not be made
    micro: list[int]                                 # micro-batches of each member in it (0: none)


def pass_widths(runs: list[MemberRun]) -> list[int]:
    """The row widths a pass is padded to (data.bucket_widths of the group's longest max_seq_len)."""
    return D.bucket_widths(max(r.cfg.train.max_seq_len for r in runs))


def fold_cap(runs: list[MemberRun]) -> int:
    """Token slots (rows x width) of the group's largest unfolded pass: every member's micro-batch
    at the longest max_seq_len, what memory admission sizes each member for (memory_prior)."""
    return sum(r.cfg.train.batch_size for r in runs) * max(r.cfg.train.max_seq_len for r in runs)


def folds(runs: list[MemberRun], windows: list[list[tuple]]) -> bool:
    """Whether this pass takes every open member's whole remaining window (its accumulation folded:
    one forward and backward for its optimizer step) rather than one micro-batch each.

    Why: a pass of short rows leaves the GPU mostly idle, and rows cost less in a larger pass (GLA-
    1.3B, 8 members x 16-token rows, graphed, H100: 53.7 ms for 8 rows a member, 79.7 ms for 16;
    bench/RESULTS.md).  The gradient is the same sum (a member's rows over its step's scored tokens)
    in another order.  Bounded: the folded pass has at most the token slots of the group's largest
    unfolded pass (fold_cap), so short data folds and data near max_seq_len does not."""
    if not any(len(w) > 1 for w in windows):
        return False
    examples = [e for w in windows for ex, _ in w for e in ex]
    longest = max(len(e["input_ids"]) for e in examples)
    width = D.bucket_width(pass_widths(runs), longest)
    return len(examples) * width <= fold_cap(runs)


def take_pass(runs: list[MemberRun]) -> Pass:
    """Every unfinished member's rows for the next pass: its next micro-batch, or its window's
    remaining micro-batches when the pass folds (folds)."""
    p = Pass([], [], [], [0] * len(runs))
    open_runs = []
    for j, r in enumerate(runs):
        if r.done:
            continue
        try:
            r.open_window()
            open_runs.append((j, r))
        except Exception as exc:  # noqa: BLE001 - a bad batch fails its member, not the group
            p.broken.append((r, exc))
    whole = folds(runs, [r.window for _, r in open_runs])
    for j, r in open_runs:
        try:
            examples, counts, p.micro[j] = r.take(whole)
            targets = [r.label_ids[e["label"]] for e in examples]
        except Exception as exc:  # noqa: BLE001 - a bad batch fails its member, not the group
            p.broken.append((r, exc))
            continue
        r.step_tokens += counts["n_tokens"]
        p.parts.append((j, examples, targets))
        p.active.append((j, r))
    return p


def eager_member_losses(model, slot: LayoutSlot, parts, runs: list[MemberRun], pad_id: int, device) -> torch.Tensor:
    """Forward and backward of the parts' rows (fla unpads by the attention mask); returns each
    member's share of its step loss, as compute_loss makes it (its rows' sum over its step's scored
    tokens), detached."""
    batch = fused_batch(parts, pad_id, len(runs), device)
    slot.current = batch["layout"]
    return backward_member_shares(row_losses(model, batch), batch["row_job"], runs)


def backward_member_shares(per_row: torch.Tensor, row_job: torch.Tensor, runs: list[MemberRun]) -> torch.Tensor:
    """Each member's rows summed over its step's scored tokens (as compute_loss divides), the sum of
    the shares backpropagated; returns the shares, detached."""
    device = per_row.device
    sums = torch.zeros(len(runs), dtype=per_row.dtype, device=device).index_add(0, row_job, per_row)
    scored = torch.tensor([r.window_scored for r in runs], dtype=per_row.dtype, device=device)
    member_loss = sums / scored
    member_loss.sum().backward()
    return member_loss.detach()


def step_members(active, member_loss: torch.Tensor) -> list[MemberRun]:
    """Adds each active member's micro-batch loss to its step loss and steps the members whose
    accumulation completed (those of a group optimizer in one step of it); returns those."""
    stepped = []
    for j, r in active:
        loss = member_loss[j]
        r.step_loss = loss if r.step_loss is None else r.step_loss + loss
        if r.closes_step():
            stepped.append(r)
    together = [r.optimizer for r in stepped if isinstance(r.optimizer, SlicedAdamW)]
    if together:
        together[0].group.step([opt.index for opt in together])
    for r in stepped:
        r.optimizer_step()
    return stepped


def micro_step(model, slot: LayoutSlot, runs: list[MemberRun], pad_id: int, device, layout=None):
    """Forward and backward of every unfinished member's next micro-batch (or folded window,
    take_pass); steps the members whose accumulation completed.  layout: how the pass's rows run,
    a fused.graphed.FusedGraphs (static rows, replayed from CUDA graphs) or a fused.packed.PackedPass
    (one row without padding), or None (eager, left-padded rows).  Returns (stepped members,
    [(member, exception)] of members whose micro-batch could not be made: those left this
    micro-step, the caller fails them)."""
    p = take_pass(runs)
    if not p.parts:
        return [], p.broken
    if layout is None:
        member_loss = eager_member_losses(model, slot, p.parts, runs, pad_id, device)
    else:
        member_loss = layout.member_losses(p, runs)
    return step_members(p.active, member_loss), p.broken
