"""The stacked LoRA layer: one frozen projection, the LoRA A/B of N jobs, each job's tokens through
its own adapter with one batched matmul (torch.bmm over a [jobs, tokens, features] layout).

Why a token layout and not a row one: fla's GLA attention removes padding before its projections
(unpad_hidden_states with the attention mask), so q/k/v/o see [1, real tokens, hidden] while the
MLP sees [rows, width, hidden].  Rows are kept in job order, so in both forms each job's tokens are
one contiguous run; TokenLayout maps a run per job into slots of a [jobs, widest run] grid (a
plain reshape when every job has the same number of tokens) and back.

Why zero padding is exact: job j's A has rows r_j..R-1 zero and its B columns r_j..R-1 zero, so
the padded rank entries add nothing to the output, and their gradients are products with those
zeros, exactly zero; a member's own optimizer never sees them (members.py gives each job views of
its true-rank slices), and the group's one AdamW (group_adamw.py), which steps whole rows, keeps
them zero (zero gradients give zero moments and a zero update; weight decay scales zero).
"""
from __future__ import annotations

import torch
import torch.nn as nn


class TokenLayout:
    """Which tokens of a flattened activation belong to which job, for one token count.

    counts[j]: tokens of job j (0 for a job with no rows in this micro-step); tokens are in job
    order.  `jobs`: indices of the jobs with tokens (None when all have); `slots`: where each token
    sits in the flattened [active jobs * width] grid (None when that grid is the tokens as they are).
    """

    def __init__(self, counts: list[int], device):
        self.counts = list(counts)
        active = [j for j, c in enumerate(counts) if c]
        self.width = max(counts) if active else 0
        self.jobs = None if len(active) == len(counts) else torch.tensor(active, device=device)
        self.slots = None
        if any(counts[j] != self.width for j in active):
            self.slots = _slots([counts[j] for j in active], self.width).to(device)
        self.n_active = len(active)


def _slots(runs: list[int], width: int) -> torch.Tensor:
    """Grid position of every token: run k's tokens go to k * width, k * width + 1, ... (on the
    host, in torch ops rather than a Python list: a batch of long rows has tens of thousands)."""
    counts = torch.tensor(runs)
    shift = torch.arange(len(runs)) * width - (torch.cumsum(counts, 0) - counts)
    return torch.arange(int(counts.sum())) + torch.repeat_interleave(shift, counts)


class BatchLayout:
    """The token layouts of one fused micro-batch, by total token count: the padded form
    (rows x width) and the unpadded one (only attention-mask tokens), which fla's GLA attention uses.

    rows_per_job[j]: rows of job j, rows in job order; attention_mask [rows, width] (host or device).
    unpadded=False: the padded form only, for a forward that gets no attention mask (the graphed
    step, fused.graphed), where fla unpads nothing.
    """

    def __init__(self, rows_per_job: list[int], attention_mask: torch.Tensor, device, unpadded: bool = True):
        width = attention_mask.shape[1]
        self.by_tokens: dict[int, TokenLayout] = {}
        padded = [r * width for r in rows_per_job]
        self.by_tokens[sum(padded)] = TokenLayout(padded, device)
        if not unpadded:
            return
        real = attention_mask.sum(1).tolist()
        real_per_job, start = [], 0
        for r in rows_per_job:
            real_per_job.append(int(sum(real[start:start + r])))
            start += r
        self.by_tokens.setdefault(sum(real_per_job), TokenLayout(real_per_job, device))

    @classmethod
    def packed(cls, tokens_per_job: list[int], device) -> "BatchLayout":
        """One packed row (fla's varlen path, fused.packed): every layer sees the same tokens, each
        job's contiguous."""
        layout = cls.__new__(cls)
        layout.by_tokens = {sum(tokens_per_job): TokenLayout(tokens_per_job, device)}
        return layout

    def for_tokens(self, n: int) -> TokenLayout:
        try:
            return self.by_tokens[n]
        except KeyError:
            raise RuntimeError(f"stacked LoRA: an activation of {n} tokens matches neither the padded nor "
                               f"the unpadded form of this batch ({sorted(self.by_tokens)})") from None


class LayoutSlot:
    """The current batch's layout, shared by every stacked layer of one model (set per micro-batch),
    and the last adapter input cast (adapter_input)."""

    def __init__(self):
        self._current: BatchLayout | None = None
        self._cast: tuple[torch.Tensor, int, torch.Tensor] | None = None   # (input, its version, the cast)

    @property
    def current(self) -> BatchLayout | None:
        return self._current

    @current.setter
    def current(self, layout: BatchLayout | None) -> None:
        self._current, self._cast = layout, None

    def adapter_input(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """x as [tokens, features] in the adapters' dtype, one cast shared by the layers that read
        the same input (q, k and v of an attention read one hidden state).

        Why: under a 16-bit base each adapter casts its input to float32 (as PEFT does); each of
        the siblings made its own copy, and in the backward its own cast back and a 16-bit sum.
        Shared, the forward is the same to the bit, the adapters' gradients too, and the base's
        input gradient sums the adapters' parts in float32 and rounds once."""
        tokens = x.reshape(-1, x.shape[-1])
        if x.dtype == dtype:
            return tokens
        if x.is_inference():   # no version counter to tell an unchanged input by
            return tokens.to(dtype)
        cast = self._cast
        if cast is not None and cast[0] is x and cast[1] == x._version and cast[2].dtype == dtype:
            return cast[2]
        out = tokens.to(dtype)
        self._cast = (x, x._version, out)
        return out


class StackedLoRALinear(nn.Module):
    """base(x) + scaling_j * B_j A_j dropout_j(x) for the tokens of each job j.

    lora_A: [jobs, R, in], lora_Bt: [jobs, R, out], each job's B transposed (R the largest rank; a
    job's unused entries zero).  Why B is kept transposed: a job's true-rank slices, A[j, :r] and
    Bt[j, :r], are then dense blocks, so its optimizer's foreach kernels take their fast path (a
    few launches for all its tensors, not a dozen per tensor: members.py gives the optimizer B as
    the transposed view, PEFT's [out, r] shape);
    `scaling`, `dropout`: per job.  Adapter math runs in lora_A's dtype, as PEFT casts the input
    to its adapter's dtype, and the sum is cast back to the base output's dtype.
    lora_A, lora_Bt: the zeroed storage of the two stacks, views of the group's flat buffers
    (fused.flat), R = max(ranks, 1).
    """

    def __init__(self, base: nn.Linear, ranks: list[int], scalings: list[float], dropouts: list[float],
                 slot: LayoutSlot, lora_A: torch.Tensor, lora_Bt: torch.Tensor):
        super().__init__()
        self.base_layer = base
        self.ranks = list(ranks)
        dtype, dev = lora_A.dtype, lora_A.device
        self.lora_A = nn.Parameter(lora_A)
        self.lora_Bt = nn.Parameter(lora_Bt)
        self.register_buffer("scaling", torch.tensor(scalings, dtype=dtype, device=dev), persistent=False)
        self.register_buffer("keep", torch.tensor([1.0 - p for p in dropouts], dtype=dtype, device=dev),
                             persistent=False)
        self.any_dropout = any(p > 0 for p in dropouts)
        self.slot = slot

    @property
    def weight(self) -> torch.Tensor:
        """The frozen base weight, as PEFT's LoRA layers expose it (model code that reads it, such as
        a fused kernel, then skips the adapters: adapters.check_refusals lists where that happens)."""
        return self.base_layer.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        n_in, n_out = self.base_layer.in_features, self.base_layer.out_features
        tokens = self.slot.adapter_input(x, self.lora_A.dtype)
        layout = self.slot.current.for_tokens(tokens.shape[0])
        a, bt, scale, keep = self.lora_A, self.lora_Bt, self.scaling, self.keep
        if layout.jobs is not None:   # jobs without rows this micro-step: leave them out of the bmm
            a, bt, scale, keep = a[layout.jobs], bt[layout.jobs], scale[layout.jobs], keep[layout.jobs]
        k, w = layout.n_active, layout.width
        if layout.slots is None:
            grid = tokens.reshape(k, w, n_in)
        else:
            grid = tokens.new_zeros(k * w, n_in).index_copy(0, layout.slots, tokens).reshape(k, w, n_in)
        if self.any_dropout and self.training:
            keep = keep[:, None, None]
            grid = grid * torch.bernoulli(keep.expand_as(grid)) / keep
        # the scaling on the rank-wide product, not on the output-wide one: the same product, and one
        # elementwise pass over [rows, r] instead of [rows, out] each way (forward and backward)
        delta = torch.bmm(torch.bmm(grid, a.transpose(1, 2)) * scale[:, None, None], bt)
        delta = delta.reshape(k * w, n_out)
        if layout.slots is not None:
            delta = delta.index_select(0, layout.slots)
        # in place: the sum is taken in the adapters' dtype and rounded to the base's, as
        # (result + delta).to(result.dtype) is, in one pass instead of two
        return result.add_(delta.reshape(*x.shape[:-1], n_out))


def adapters_in_tf32(base_dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a group's fp32 matmuls may run in TF32: on a GPU, under a 16-bit base.

    Why that is safe: under a bf16/fp16 base they are only the stacked adapters' (the base runs in
    its dtype, fla's kernels in Triton); their inputs are the base's 16-bit activations, exact in
    TF32's 10-bit mantissa, and each adapter's output is added to a 16-bit base output, which rounds
    no finer than TF32 does.  Why it matters: in fp32 the adapters' bmm took about a quarter of a
    graphed GLA-1.3B group step (H100 profile, bench/RESULTS.md).  An fp32 base keeps full fp32."""
    return device.type == "cuda" and base_dtype in (torch.bfloat16, torch.float16)
