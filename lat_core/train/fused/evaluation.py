"""The evaluation of a fused group's members that are due at the same step, in one pass per batch.

Why: a member evaluating alone runs its validation batches through the shared base while every
other member waits, so a group of K members that evaluate at one step (a suite's jobs share
eval_every) spent K passes over the split where a process per job spent one each, concurrently.
Members at the same step that evaluate the same encoded examples in the same batches (same data,
max_seq_len and eval batch size: a suite's jobs) share one forward per batch: each batch is repeated once per
member, each copy through its member's adapter (GroupEvalView), and each member's predictions,
loss and metrics come from its copy exactly as its own evaluation computes them
(evaluation.cls_eval_copies).  Its predictions files, validation scores and best metric go through
its own LatRun.record.

A shared pass that raises is not blamed on its members: each then evaluates alone, and an error
there is that member's alone (the runner fails it).
"""
from __future__ import annotations

import torch.nn as nn

from ..evaluation import evaluate_cls_copies, set_logits_to_keep
from ..events import log
from .stacked import BatchLayout


class GroupEvalView(nn.Module):
    """The shared base answering each batch once per member in ``indices`` (ascending), in blocks
    of the batch's rows, each block through that member's adapter."""

    def __init__(self, base: nn.Module, slot, indices: list[int], n_jobs: int):
        super().__init__()
        self.base, self.slot, self.indices, self.n_jobs = base, slot, list(indices), n_jobs

    def get_base_model(self) -> nn.Module:
        return self.base

    def forward(self, input_ids, attention_mask, **kwargs):
        copies = len(self.indices)
        rows = [0] * self.n_jobs
        for j in self.indices:
            rows[j] = input_ids.shape[0]
        mask = attention_mask.repeat(copies, 1)
        self.slot.current = BatchLayout(rows, mask.cpu(), input_ids.device)
        return self.base(input_ids=input_ids.repeat(copies, 1), attention_mask=mask, **kwargs)


def _share_key(member) -> tuple:
    cfg = member.run.cfg
    return (member.run.step, cfg.data, str(cfg.data_dir), cfg.train.max_seq_len,
            cfg.eval.batch_size or cfg.train.batch_size, cfg.train.eval_accumulation_steps)


def sharing(due: list) -> list[list]:
    """The due members in sets that evaluate the same batches, each set in member order."""
    sets: dict[tuple, list] = {}
    for m in sorted(due, key=lambda m: m.run.member.index):
        sets.setdefault(_share_key(m), []).append(m)
    out = []
    for members in sets.values():   # the same encoded examples, checked, not assumed from the key
        first = members[0].lat
        same = [m for m in members if all(m.lat.splits.get(s) == first.splits[s] for s in first.eval_splits())]
        out.append(same)
        out += [[m] for m in members if m not in same]
    return out


def evaluate_due(group, due: list) -> dict[int, object]:
    """id(member) -> its [(split, metrics)] at its step, or the exception its evaluation raised."""
    results: dict[int, object] = {}
    for members in sharing(due):
        if len(members) > 1:
            try:
                results.update(_evaluate_together(group, members))
                continue
            except Exception as exc:  # noqa: BLE001 - not one member's fault: each evaluates alone
                log(f"evaluation of {len(members)} members in one pass failed ({type(exc).__name__}: {exc}); "
                    "each evaluates alone")
        for m in members:
            try:
                results[id(m)] = m.lat.evaluate(m.view, m.run.step)
            except Exception as exc:  # noqa: BLE001 - this member's own failure, raised in after_step
                results[id(m)] = exc
    return results


def _evaluate_together(group, members: list) -> dict[int, list]:
    step = members[0].run.step   # the same for all (_share_key)
    view = GroupEvalView(group.base, group.slot, [m.run.member.index for m in members], len(group.runs))
    set_logits_to_keep(view, members[0].run.cfg.train.logits_to_keep)
    first = members[0].lat
    out: dict[int, list] = {id(m): [] for m in members}
    for split in first.eval_splits():
        per_member = evaluate_cls_copies(view, first.tokenizer, first.splits[split], first.ds, first.cfg,
                                         first.label_ids, first.mm_examples(split), copies=len(members))
        for m, (metrics, rows) in zip(members, per_member):
            out[id(m)].append(m.lat.record(step, split, metrics, rows))
    for m in members:
        m.lat.last_eval = out[id(m)]
    return out
