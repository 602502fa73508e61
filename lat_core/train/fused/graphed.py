"""CUDA graphs for a fused group's micro-step (issue 17): the eager fused step is bound by the CPU
launching kernels as a single job's is (189 ms for 8 jobs x 8 rows x 16 tokens of GLA-1.3B on an
H200, bench/RESULTS.md); replayed from a captured graph it costs what the GPU needs.

How it differs from the eager fused step (step.eager_member_losses), and why:

- static shapes: each member's rows are its micro-batch size times the micro-batches it brings to
  the pass (a short micro-batch gets all-pad rows that score nothing), every row one width from
  data.bucket_widths (the smallest holding the pass's longest example).  One graph per (width, rows
  of each member): a member that leaves the group changes the key and the group captures again, a
  handful of graphs in a run;
- no attention mask reaches fla (its unpadding waits for the host): graphs.PadKeyMask zeroes the
  keys of pad positions as in a single job's graphed step, so the stacked layers see only the
  padded token layout (BatchLayout unpadded=False);
- a member's loss share is divided by its step's scored tokens from a device tensor filled before
  each replay;
- gradients accumulate in place into the stacks' gradient buffers (allocated once by
  members.install, outside the graphs' pool), which the optimizer reads (the group's flat buffer,
  or each member's views of it);
- the optimizer step of the members that step and the clearing of their gradients are one
  captured graph for the group (group_adamw.GroupAdamW, learning rates a device vector the
  schedules fill), or, with LAT_FUSED_ONE_ADAMW=0, one per member (MemberAdamW; AdamW capturable,
  the learning rate a device tensor its schedule fills).

A key's first micro-step runs eagerly (the warm-up: Triton autotuning, cuBLAS workspaces), its second
is captured and replayed, as graphs.GraphedSteps does for a single job.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import data as D
from ..graphs import GraphedAdamW, PadKeyMask, capture, graphs_blocker, on_side_stream
from .stacked import BatchLayout
from .step import pass_widths

STATIC_KEYS = ("input_ids", "attention_mask", "target", "row_job")


def graphs_decision(cfgs, device: torch.device) -> tuple[bool, str]:
    """(on, why) for a group: graphs need every member to allow them (train.graphs not false) and
    nothing in any member's step that a graph cannot hold (graphs.graphs_blocker)."""
    for cfg in cfgs:
        if cfg.train.graphs is False:
            return False, f"{cfg.name}: train.graphs: false"
        why = graphs_blocker(cfg, device, world=1)
        if why:
            return False, f"{cfg.name}: {why}"
    widths = D.bucket_widths(max(c.train.max_seq_len for c in cfgs))
    return True, "static widths " + ",".join(map(str, widths))


class MemberAdamW(GraphedAdamW):
    """A member's AdamW in a graphed group: its update and the clearing of its gradient slices are
    one captured graph (the slices are views with strides, so each clear would be a launch)."""
    clears_grads = True

    def _update(self) -> None:
        super()._update()
        torch._foreach_zero_([p.grad for g in self.param_groups for p in g["params"]])


def static_fused_batch(parts, rows: list[int], widths: list[int], pad_id: int) -> dict:
    """The micro-step's rows in a static shape (host tensors): member j's examples left-padded to
    the bucket width, then all-pad rows up to rows[j]; `target` the label token of each row (-100 on
    pad rows), `row_job` each row's member, `rows` the rows of every member (0: not in this step)
    and `key` what a captured graph is specific to."""
    longest = max(len(e["input_ids"]) for _, examples, _ in parts for e in examples)
    width = D.bucket_width(widths, longest)
    per_job = [0] * len(rows)
    ids, mask, target, row_job = [], [], [], []
    for j, examples, labels in parts:
        n = max(rows[j], len(examples))
        extra = n - len(examples)
        batch = D.collate(examples, pad_id, width)
        ids += [batch["input_ids"], torch.full((extra, width), pad_id, dtype=torch.long)]
        mask += [batch["attention_mask"], torch.zeros((extra, width), dtype=torch.long)]
        target += list(labels) + [-100] * extra
        row_job += [j] * n
        per_job[j] = n
    return {"input_ids": torch.cat(ids), "attention_mask": torch.cat(mask), "target": torch.tensor(target),
            "row_job": torch.tensor(row_job), "rows": per_job, "key": (width, tuple(per_job))}


class _Captured:
    def __init__(self, graph, inputs: dict, loss: torch.Tensor, layout: BatchLayout):
        self.graph, self.inputs, self.loss, self.layout = graph, inputs, loss, layout   # layout: kept alive


class FusedGraphs:
    """Each micro-step's member losses, from captured graphs.  capture=False runs the same static
    step eagerly every time (the CPU tests compare it with the eager fused step)."""

    def __init__(self, group, capture_graphs: bool = True):
        runs = group.runs
        self.model, self.slot, self.device, self.pad_id = group.base, group.slot, group.device, group.pad_id
        self.rows = [r.cfg.train.batch_size for r in runs]
        self.widths = pass_widths(runs)
        self.pad_mask = PadKeyMask(group.base)
        self.dtype = next(group.base.parameters()).dtype
        self.scored = torch.ones(len(runs), dtype=torch.float32, device=self.device)
        self.capture_graphs = capture_graphs
        self.captured: dict[tuple, _Captured] = {}
        self.warm: set[tuple] = set()
        if capture_graphs:
            self.pool = torch.cuda.graph_pool_handle()
            self.stream = torch.cuda.Stream(self.device)

    def member_losses(self, p, runs) -> torch.Tensor:
        """Forward and backward of a pass's rows (step.Pass); each member's share of its step loss
        (detached).  A member's static rows are its micro-batch size times the micro-batches it
        brings (more than one when the pass folds its accumulation)."""
        rows = [batch * micro for batch, micro in zip(self.rows, p.micro)]
        host = static_fused_batch(p.parts, rows, self.widths, self.pad_id)
        host["scored"] = torch.tensor([float(r.window_scored) for r in runs])
        if self.device.type == "cuda":   # copies from pinned memory queue without waiting for the GPU
            host.update({name: host[name].pin_memory() for name in (*STATIC_KEYS, "scored")})
        self.scored.copy_(host["scored"], non_blocking=True)
        key = host["key"]
        cap = self.captured.get(key)
        if cap is not None:
            for name in STATIC_KEYS:
                cap.inputs[name].copy_(host[name], non_blocking=True)
            cap.graph.replay()
            return cap.loss.clone()
        inputs = {name: host[name].to(self.device) for name in STATIC_KEYS}
        layout = BatchLayout(host["rows"], host["attention_mask"], self.device, unpadded=False)
        if not self.capture_graphs:
            return self._forward_backward(inputs, layout)
        if key not in self.warm:
            self.warm.add(key)
            return on_side_stream(self.stream, self.device, lambda: self._forward_backward(inputs, layout))
        graph, loss = capture(lambda: self._forward_backward(inputs, layout), self.pool, self.stream)
        self.captured[key] = _Captured(graph, inputs, loss, layout)
        from ..events import log
        log(f"graphs: captured the fused step at width {key[0]}, rows {list(key[1])} ({len(self.captured)} captured)")
        return loss.clone()

    def _forward_backward(self, inputs: dict, layout: BatchLayout) -> torch.Tensor:
        self.slot.current = layout
        self.pad_mask.mask = inputs["attention_mask"].unsqueeze(-1).to(self.dtype)
        try:
            logits = self.model(input_ids=inputs["input_ids"], logits_to_keep=2).logits
        finally:
            self.pad_mask.mask = None
        per_row = F.cross_entropy(logits[:, -2].float(), inputs["target"], reduction="none", ignore_index=-100)
        sums = torch.zeros(len(self.rows), dtype=per_row.dtype, device=self.device)
        member_loss = sums.index_add(0, inputs["row_job"], per_row) / self.scored
        member_loss.sum().backward()
        return member_loss.detach()
