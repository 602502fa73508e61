"""Padding-free packing of a fused group's pass (issue 17): every member's examples back to back in
one row, fla's varlen path (`cu_seqlens`) resetting the recurrent state at each example, as a single
job packs its micro-batch (train.pack, data.packed_batch).  Members stay contiguous, in member
order, so each stacked layer's token layout is one run of tokens per member (BatchLayout.packed).

Only the eager step packs: a captured graph replays fixed shapes, and a packed row's length
changes every pass.  The group packs when every member would pack alone with the group's graphs
decision (graphs.pack_decision: GLA, train.pack not false; `auto` packs on the CPU only).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import data as D
from ..graphs import pack_decision
from .stacked import BatchLayout, LayoutSlot
from .step import Pass, backward_member_shares


def packing_decision(cfgs, device: torch.device, graphed: bool) -> tuple[bool, str]:
    """(on, why) for a group: the first member that would not pack alone names the reason."""
    for cfg in cfgs:
        on, why = pack_decision(cfg, device, graphed)
        if not on:
            return False, f"{cfg.name}: {why}"
    return True, "one row a pass, fla varlen (cu_seqlens)"


class PackedPass:
    """Each pass's member losses from one packed row: the logits of the position before each
    example's label token only, the loss over label tokens unchanged."""

    def __init__(self, model: torch.nn.Module, slot: LayoutSlot, device: torch.device):
        self.model, self.slot, self.device = model, slot, device

    def member_losses(self, p: Pass, runs) -> torch.Tensor:
        examples = [e for _, ex, _ in p.parts for e in ex]
        row = D.packed_batch(examples)
        tokens, example_job, targets = [0] * len(runs), [], []
        for j, ex, labels in p.parts:
            tokens[j] = sum(len(e["input_ids"]) for e in ex)
            example_job += [j] * len(ex)
            targets += labels
        self.slot.current = BatchLayout.packed(tokens, self.device)
        to = {"device": self.device, "non_blocking": True}
        logits = self.model(input_ids=row["input_ids"].to(**to), cu_seqlens=row["cu_seqlens"].to(**to),
                            logits_to_keep=row["keep"].to(**to)).logits[0]
        per_example = F.cross_entropy(logits.float(), torch.tensor(targets).to(**to), reduction="none")
        return backward_member_shares(per_example, torch.tensor(example_job).to(**to), runs)
