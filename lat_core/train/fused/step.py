"""One fused micro-step: every training member adds its next micro-batch, one forward and backward
run over all rows, and each member whose gradient accumulation completes steps its own optimizer.

What makes a member's step equal its step alone: its micro-batches come from the same seeded
sampler (data.MicroBatchSampler) from its own resume step; its loss is its label-token cross entropy summed over its rows and divided by the scored tokens of its whole step, as
LatTrainer.compute_loss does; gradients of its A/B depend only on its own rows; its optimizer is
its own AdamW over its own parameters, its schedule a LambdaLR built as a single job builds it
(hf_trainer.build_scheduler), with no gradient clipping (max_grad_norm 0 there too).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .. import data as D
from . import members as M
from .stacked import BatchLayout, LayoutSlot


@dataclass
class MemberRun:
    """A member's training state: config, data, optimizer, schedule, where it is in its step."""
    cfg: object
    member: M.Member
    train_ex: list[dict]
    label_ids: list[int]
    optimizer: torch.optim.Optimizer
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

    def next_micro(self) -> tuple[list[dict], dict]:
        """(examples, host counts) of the member's next micro-batch; opens a new step's window first."""
        if not self.window:
            micro = [[self.train_ex[i] for i in next(self._micro)] for _ in range(self.cfg.train.grad_accum)]
            self.window = [(ex, _counts(ex)) for ex in micro]
            self.window_scored = max(1, sum(c["n_scored"] for _, c in self.window))
        return self.window.pop(0)

    def closes_step(self) -> bool:
        return not self.window

    def optimizer_step(self) -> None:
        """The member's own AdamW step and schedule step; its gradient slices cleared in place."""
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


def new_optimizer(cfg, member: M.Member, graphed: bool = False) -> torch.optim.Optimizer:
    """AdamW as a single job makes it (loop.run): one group, the job's lr and weight decay;
    graphed: its step (and the clearing of the member's gradients) a captured graph."""
    from .graphed import MemberAdamW
    tr = cfg.train
    return (MemberAdamW if graphed else torch.optim.AdamW)(
        [{"params": member.params, "weight_decay": tr.weight_decay}], lr=tr.lr, weight_decay=tr.weight_decay)


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


def take_micro_batches(runs: list[MemberRun]):
    """Every unfinished member's next micro-batch: (parts, active, broken).  parts: (member index,
    examples, label tokens) in member order; active: (index, run); broken: (run, exception) of the
    members whose micro-batch could not be made (the caller fails them)."""
    parts, active, broken = [], [], []
    for j, r in enumerate(runs):
        if r.done:
            continue
        try:
            examples, counts = r.next_micro()
            targets = [r.label_ids[e["label"]] for e in examples]
        except Exception as exc:  # noqa: BLE001 - a bad batch fails its member, not the group
            broken.append((r, exc))
            continue
        r.step_tokens += counts["n_tokens"]
        parts.append((j, examples, targets))
        active.append((j, r))
    return parts, active, broken


def eager_member_losses(model, slot: LayoutSlot, parts, runs: list[MemberRun], pad_id: int, device) -> torch.Tensor:
    """Forward and backward of the parts' rows (fla unpads by the attention mask); returns each
    member's share of its step loss, as compute_loss makes it (its rows' sum over its step's scored
    tokens), detached."""
    batch = fused_batch(parts, pad_id, len(runs), device)
    slot.current = batch["layout"]
    per_row = row_losses(model, batch)
    sums = torch.zeros(len(runs), dtype=per_row.dtype, device=device).index_add(0, batch["row_job"], per_row)
    scored = torch.tensor([r.window_scored for r in runs], dtype=per_row.dtype, device=device)
    member_loss = sums / scored
    member_loss.sum().backward()
    return member_loss.detach()


def step_members(active, member_loss: torch.Tensor) -> list[MemberRun]:
    """Adds each active member's micro-batch loss to its step loss and steps the members whose
    accumulation completed; returns those."""
    stepped = []
    for j, r in active:
        loss = member_loss[j]
        r.step_loss = loss if r.step_loss is None else r.step_loss + loss
        if r.closes_step():
            r.optimizer_step()
            stepped.append(r)
    return stepped


def micro_step(model, slot: LayoutSlot, runs: list[MemberRun], pad_id: int, device, graphs=None):
    """Forward and backward of every unfinished member's next micro-batch; steps the members whose
    accumulation completed.  graphs: a fused.graphed.FusedGraphs (the step replayed from CUDA
    graphs) or None (eager).  Returns (stepped members, [(member, exception)] of members whose
    micro-batch could not be made: those left this micro-step, the caller fails them)."""
    parts, active, broken = take_micro_batches(runs)
    if not parts:
        return [], broken
    if graphs is None:
        member_loss = eager_member_losses(model, slot, parts, runs, pad_id, device)
    else:
        member_loss = graphs.member_losses(parts, runs)
    return step_members(active, member_loss), broken
