"""CUDA graphs for the training step, and which speed modes (graphs, packing) a job runs with.

Why graphs: a small GLA LoRA step is bound by the CPU launching a few thousand kernels (124 ms eager
for 8 rows x 16 tokens of GLA-1.3B on an H200, with the GPU mostly idle); replaying the same step
as a captured CUDA graph launches it in one call (19 ms).  A graph replays fixed shapes and fixed
memory, so:

- micro-batches are laid out with static shapes (data.Layout "static"): the row count of the
  micro-batch and a width from data.bucket_widths (16, 32, 64, ... max_seq_len); one graph per
  width, all in one memory pool;
- nothing in the step may wait for the host.  fla unpads a left-padded batch by its attention_mask
  (a device-to-host sync), so the graphed forward gets no mask; PadKeyMask zeroes the keys (and, with
  short convolutions, queries and values) of pad positions instead.  GLA's state is a sum of
  key-value products decayed by gates, so with zero keys the left padding leaves it at zero, and
  each example's first real token starts from the same zero state as in the unpadded forward;
- the optimizer is AdamW with ``capturable=True`` and the learning rate as a device tensor that the
  schedule fills in place, so one captured optimizer step serves every step.

Where the graphs sit: around the HF Trainer's ``training_step`` (one micro-batch's forward and
backward: GraphedSteps) and its ``optimizer.step()`` (GraphedAdamW).  The Trainer's inner loop
stays: gradient accumulation, the lr schedule, clipping, logging, evaluation, checkpoints and
callbacks run as for an eager job.  Gradients accumulate in place into fixed buffers that the
graphs write; the Trainer's ``model.zero_grad()`` (set to None) is undone at the next step's first
micro-batch, which re-attaches the buffers zeroed.  Each width's first micro-batch runs eagerly (it
is the warm-up: Triton autotuning, cuBLAS workspaces), the second is captured and replayed; the
optimizer's first step runs eagerly (it creates AdamW's state), the second is captured.  Evaluation
and generation stay eager (the model is the same; the graphs only hold its training step).

Sharing one pool between graphs is safe here because nothing a graph leaves behind outlives the
next replay: gradients, inputs and optimizer state are allocated outside the pool, and the one
output (the micro-batch loss) is copied out before another graph runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from lat_core.config.graph_capture import capture_blocker
from lat_core.config.job import JobConfig

from .events import log


@dataclass(frozen=True)
class SpeedModes:
    """What the job (or a fused group) runs with and, for a mode that is off, why (logged and in the
    started event)."""
    graphs: bool
    graphs_why: str
    pack: bool
    pack_why: str

    def event(self, cfg: JobConfig) -> dict:
        t = cfg.train
        return {"graphs": {"setting": t.graphs, "on": self.graphs, "why": self.graphs_why},
                "pack": {"setting": t.pack, "on": self.pack, "why": self.pack_why}}

    def line(self, scope: str = "") -> str:
        """``graphs: on (why); pack: off (why)``; scope follows graphs' on/off (" for the group")."""
        return (f"graphs: {'on' if self.graphs else 'off'}{scope} ({self.graphs_why}); "
                f"pack: {'on' if self.pack else 'off'} ({self.pack_why})")


def graphs_blocker(cfg: JobConfig, device: torch.device, world: int) -> str | None:
    """Why this job's training step cannot be captured, or None when it can."""
    if device.type != "cuda":
        return f"CUDA graphs need a GPU; this job runs on the {device.type}"
    if world > 1:
        return f"torchrun with {world} ranks: DDP's gradient all-reduce is not captured"
    return capture_blocker(cfg)


def resolve_modes(cfg: JobConfig, device: torch.device, world: int) -> SpeedModes:
    """train.graphs and train.pack (auto|false) for this job on this device.  Graphs win over
    packing where both could run: a packed row's layout changes every step, a graph needs fixed
    shapes."""
    t = cfg.train
    blocker = graphs_blocker(cfg, device, world)
    if t.graphs is False:
        graphs, graphs_why = False, "train.graphs: false"
    elif blocker:
        graphs, graphs_why = False, blocker
    else:
        graphs, graphs_why = True, "static widths " + ",".join(map(str, _widths(cfg)))
    pack, pack_why = pack_decision(cfg, device, graphs)
    return SpeedModes(graphs, graphs_why, pack, pack_why)


def pack_decision(cfg: JobConfig, device: torch.device, graphs: bool) -> tuple[bool, str]:
    """(on, why) for train.pack, given whether the step is graphed (a job's, or a fused group's)."""
    t = cfg.train
    if t.pack is False:
        return False, "train.pack: false"
    if graphs:
        return False, "graphs on: a graph replays fixed shapes, a packed row changes every step"
    if cfg.model.family != "gla":
        return False, f"{cfg.model.family} has no varlen path here"
    if t.pack == "auto" and device.type == "cuda":
        return False, (f"auto: on {device.type} a packed step measured slower than the padded one "
                       "(bench/RESULTS.md, 2026-11-23); train.pack: true packs anyway")
    return True, "one row per micro-batch, fla varlen (cu_seqlens)"


def _widths(cfg: JobConfig) -> list[int]:
    from .data import bucket_widths
    return bucket_widths(cfg.train.max_seq_len)


def layout_for(cfg: JobConfig, modes: SpeedModes):
    """The training collate's layout (data.Layout) for these modes."""
    from .data import Layout
    if modes.graphs:
        # generation: the positions of the longest target (+ eos) and the one before it
        return Layout("static", rows=cfg.train.batch_size, widths=tuple(_widths(cfg)),
                      keep_gen=cfg.eval.max_target_len + 2)
    return Layout("packed") if modes.pack else Layout()


# ---------------------------------------------------------------------------------------------
# The pad mask that replaces fla's unpadding in the graphed forward

class PadKeyMask:
    """Forward hooks that multiply each GLA layer's key projection (and query / value projections
    where the layer has short convolutions, whose window would otherwise reach into the padding) by
    the current micro-batch's pad mask.  Active only while `mask` is set, that is inside
    GraphedSteps; evaluation and generation see the model unchanged."""

    def __init__(self, model):
        self.mask: torch.Tensor | None = None
        self.handles = []
        for module in model.modules():
            if not (hasattr(module, "k_proj") and hasattr(module, "gk_proj")):  # a GLA attention layer
                continue
            names = ["k_proj"] + (["q_proj", "v_proj"] if getattr(module, "use_short_conv", False) else [])
            for name in names:
                self.handles.append(getattr(module, name).register_forward_hook(self._hook))
        if not self.handles:
            raise RuntimeError("PadKeyMask: no GLA attention layer (k_proj and gk_proj) in the model")

    def _hook(self, module, inputs, output):
        return output if self.mask is None else output * self.mask

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def masked_static_loss(model, pad_mask: PadKeyMask, batch: dict) -> torch.Tensor:
    """evaluation.static_loss with the pad mask on: the graphed step's forward, also run eagerly
    (the warm-up, and the CPU test that bucketing keeps the losses of the padded forward)."""
    from .evaluation import static_loss
    pad_mask.mask = batch["attention_mask"].unsqueeze(-1).to(next(model.parameters()).dtype)
    try:
        return static_loss(model, batch)
    finally:
        pad_mask.mask = None


# ---------------------------------------------------------------------------------------------
# Forward and backward of one micro-batch

STATIC_KEYS = ("input_ids", "attention_mask", "targets")


class _Captured:
    """One width's graph with its static inputs and its output."""

    def __init__(self, graph, inputs: dict, loss: torch.Tensor):
        self.graph, self.inputs, self.loss = graph, inputs, loss


class GraphedSteps:
    """Runs one micro-batch's forward and backward: eagerly the first time a width is seen, from a
    captured graph after.  `run` returns the micro-batch loss divided by the step's scored tokens
    (as LatTrainer.compute_loss does) and leaves the gradients accumulated in `grads`."""

    def __init__(self, model, params: list[torch.nn.Parameter], device: torch.device):
        self.model, self.params, self.device = model, params, device
        self.pad_mask = PadKeyMask(model)
        self.grads = [torch.zeros_like(p) for p in params]
        self.inv_n = torch.zeros((), device=device, dtype=torch.float32)  # 1 / scored tokens of the step
        self.pool = torch.cuda.graph_pool_handle()
        self.captured: dict[int, _Captured] = {}
        self.warm: set[int] = set()
        self.stream = torch.cuda.Stream(device)

    def attach_grads(self, zero: bool) -> None:
        """Point every parameter's .grad at its fixed buffer (the Trainer's zero_grad set them to
        None); `zero` at a step's first micro-batch."""
        if zero:
            torch._foreach_zero_(self.grads)
        for p, g in zip(self.params, self.grads):
            if p.grad is not g:
                p.grad = g

    def run(self, batch: dict, n_scored_step: int, first: bool) -> torch.Tensor:
        self.attach_grads(zero=first)
        self.inv_n.fill_(1.0 / max(1, n_scored_step))
        width = batch["input_ids"].shape[1]
        cap = self.captured.get(width)
        if cap is not None:
            for key in STATIC_KEYS:
                cap.inputs[key].copy_(batch[key], non_blocking=True)
            cap.graph.replay()
            return cap.loss.clone()
        if width not in self.warm:
            self.warm.add(width)
            return self._on_side_stream(lambda: self._forward_backward(batch))
        return self._capture(width, batch)

    def _forward_backward(self, batch: dict) -> torch.Tensor:
        loss = masked_static_loss(self.model, self.pad_mask, batch) * self.inv_n
        loss.backward()
        return loss.detach()

    def _on_side_stream(self, fn):
        return on_side_stream(self.stream, self.device, fn)

    def _capture(self, width: int, batch: dict) -> torch.Tensor:
        inputs = {key: batch[key].clone() for key in STATIC_KEYS}
        graph, loss = capture(lambda: self._forward_backward(inputs), self.pool, self.stream)
        self.captured[width] = _Captured(graph, inputs, loss)
        log(f"graphs: captured the training step at width {width} ({len(self.captured)} captured)")
        return loss.clone()


def on_side_stream(stream, device: torch.device, fn):
    """Runs fn on a side stream, as torch.cuda.graphs asks of a warm-up before a capture."""
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        out = fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    return out


def capture(fn, pool, stream):
    """(graph, fn's output): fn captured as a CUDA graph in `pool` on `stream`, then replayed once
    (capturing records the work without doing it)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        out = fn()
    graph.replay()
    return graph, out


# ---------------------------------------------------------------------------------------------
# The optimizer step

class GraphedAdamW(torch.optim.AdamW):
    """AdamW (capturable, foreach) whose step is captured once its state exists (the first step
    creates it, eagerly) and replayed after.  The learning rate is a device tensor
    (set_tensor_lr), filled by the schedule, so the one graph follows the schedule."""

    def __init__(self, params, **kwargs):
        super().__init__(params, capturable=True, foreach=True, **kwargs)
        self._graph = None
        self._pool = None

    def share_pool(self, pool) -> None:
        self._pool = pool

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("GraphedAdamW: a closure cannot be captured")
        if self._graph is not None:
            self._graph.replay()
            return None
        if not self.state:
            return self._update()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        self._graph, _ = capture(self._update, self._pool, stream)
        torch.cuda.current_stream().wait_stream(stream)
        return None

    def _update(self) -> None:
        """What one step does, and the captured graph holds: AdamW's update (a subclass adds to it)."""
        torch.optim.AdamW.step(self)

    def load_state_dict(self, state_dict) -> None:
        if self._graph is not None:   # a captured step points at the old state tensors
            raise RuntimeError("GraphedAdamW: load the state before the first captured step")
        super().load_state_dict(state_dict)


def set_optimizer_mode(optimizer, graphed: bool, device: torch.device) -> None:
    """After building the schedule (and restoring a checkpoint, which may come from the other mode):
    graphed, the learning rate becomes a device tensor the schedule fills in place and AdamW's step
    counters live on the device; eager, plain floats and host counters as the Trainer always had."""
    for group in optimizer.param_groups:
        group["capturable"] = graphed
        lr = float(group["lr"])
        group["lr"] = torch.tensor(lr, device=device, dtype=torch.float32) if graphed else lr
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            state["step"] = step.to(device=device if graphed else "cpu", dtype=torch.float32)
