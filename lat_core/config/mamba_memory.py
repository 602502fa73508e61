"""Mamba's sizes and activation memory, for the static prior (:mod:`lat_core.config.memory_prior`).

Why a model of its own: transformers' Mamba without the mamba_ssm / causal_conv1d kernels (the "slow
path", always on the CPU) discretises the SSM for the whole sequence in float32 and runs the scan as a
Python loop, and autograd keeps, per layer, tensors of rows x tokens x d_inner x state_size:
``discrete_A`` (fp32, saved by exp and by each step's multiply), ``discrete_B`` (fp32, saved by the
multiply that makes ``deltaB_u``), every step's fp32 state (saved by the next step's multiply) and, in
bf16/fp16, its cast for the output matmul (2 bytes): 12 bytes per element in fp32, 14 in bf16. That is
counted from transformers' modeling_mamba.py (``mamba_selective_scan``), not guessed. On top: the
layer being run or differentiated holds ``deltaB_u`` and a gradient buffer of the same size (fp32:
8 bytes), and the tensors of d_inner per token (the in_proj output, the convolution, dt in fp32, the
gate; ~30 bytes per d_inner in bf16) and of hidden per token (residual and norm, ~12 bytes).

Checked against an H200 (bench/RESULTS.md, "Mamba fused against Mamba alone"): Mamba-130m shape
(hidden 768 x 24 layers, d_inner 1536, state 16), 16 rows x 256 tokens, bf16: this count gives
37.3 GiB of activations and 1.9 GiB of logits, 40.5 GiB with the weights, the adapter's state and
the CUDA context; NVML showed 39.7 GiB per process. The count is therefore taken
as it is, without the allocator's 20% (the states are a few large blocks of one size, reused layer
after layer). On the CPU (bench/bench_mamba_memory.py, peak RSS growth of a LoRA step; see
bench/RESULTS.md) malloc keeps more: the per-layer slope measured ~20 bytes per element at state 16
(fp32) and the layer being run ~40, so the CPU estimate takes those measured figures.

The fast path (mamba_ssm's fused selective scan) keeps per token only the in_proj output, the scan's
input and output (rows x tokens x d_inner) and chunk states: taken as 8 bytes per d_inner and layer
in bf16, uncalibrated (no GPU with mamba_ssm measured here); a job's measured peak replaces it.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Any

# transformers' MambaConfig defaults (the state-spaces/mamba-*-hf checkpoints' config.json omit some).
MAMBA_DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 32, "state_size": 16, "vocab_size": 50280,
                  "expand": 2, "conv_kernel": 4, "time_step_rank": "auto", "tie_word_embeddings": True,
                  "use_bias": False, "use_conv_bias": True}
MAMBA_KERNELS = ("mamba_ssm", "causal_conv1d")  # both needed for transformers' fast path

# The slow path (see the module docstring): bytes per row x token x d_inner x state_size.
SLOW_STATE_BYTES_FP32 = 12          # discrete_A, discrete_B, the scan's states: kept per layer
SLOW_STATE_CAST_BYTES = 2           # each state's bf16/fp16 cast for the output matmul, kept per layer
SLOW_LAYER_TRANSIENT_BYTES = 8      # deltaB_u and a gradient buffer of the layer being run
SLOW_INNER_BYTES = 30               # per d_inner per token and layer (bf16)
HIDDEN_BYTES = 12                   # per hidden per token and layer: residual, norm (bf16)
# On the CPU, measured (peak RSS growth, fp32): per layer and the layer being run, per element.
CPU_SLOW_LAYER_BYTES = 20
CPU_SLOW_TRANSIENT_BYTES = 40
FAST_INNER_BYTES = 8                # the fast path, per d_inner per token and layer (bf16); uncalibrated


@dataclass(frozen=True)
class MambaShape:
    """The sizes of a transformers Mamba model that its memory depends on."""
    hidden: int
    layers: int
    state: int
    inner: int       # d_inner = expand x hidden
    dt_rank: int
    conv_kernel: int
    vocab: int
    tied: bool
    bias: bool
    conv_bias: bool

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each per-layer nn.Linear, by the short names LoRA targets."""
        return {"in_proj": (self.hidden, 2 * self.inner), "x_proj": (self.inner, self.dt_rank + 2 * self.state),
                "dt_proj": (self.dt_rank, self.inner), "out_proj": (self.inner, self.hidden)}

    def param_count(self) -> int:
        """Parameters of transformers' MambaForCausalLM with these sizes (no adapter)."""
        per_layer = sum(i * o for i, o in self.linear_shapes().values())
        per_layer += self.inner                                    # dt_proj's bias
        per_layer += 2 * self.inner * self.bias + self.hidden * self.bias  # in_proj/out_proj biases
        per_layer += self.inner * self.conv_kernel + self.inner * self.conv_bias
        per_layer += self.inner * self.state + self.inner + self.hidden  # A_log, D, the block's norm
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * per_layer + embeddings + self.hidden  # + the final norm


def mamba_shape(config: Mapping[str, Any]) -> MambaShape:
    """Sizes from a Mamba config mapping (config.json or model.tiny), transformers' defaults for the rest."""
    c = {**MAMBA_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    hidden = int(c["hidden_size"])
    rank = c["time_step_rank"]
    return MambaShape(hidden=hidden, layers=int(c["num_hidden_layers"]), state=int(c["state_size"]),
                      inner=int(c["expand"]) * hidden,
                      dt_rank=math.ceil(hidden / 16) if rank == "auto" else int(rank),
                      conv_kernel=int(c["conv_kernel"]), vocab=int(c["vocab_size"]),
                      tied=bool(c["tie_word_embeddings"]), bias=bool(c["use_bias"]),
                      conv_bias=bool(c["use_conv_bias"]))


def fast_path_expected(find_spec: Callable[[str], object] = importlib.util.find_spec) -> bool:
    """Whether a GPU job will take the fast path: the kernel packages are installed for this Python
    (the trainer runs with the engine's interpreter). ``find_spec`` locates a top-level package without
    importing it (so no torch here); a kernel that is installed but fails to import is taken as fast,
    and its measured peak corrects that after one run."""
    return all(find_spec(name) is not None for name in MAMBA_KERNELS)


def gpu_activation_bytes(shape: MambaShape, tokens: int, dtype_bytes: int, fast: bool) -> int:
    """Activations of one micro-batch on a GPU, excluding logits (see the module docstring)."""
    scale = dtype_bytes / 2
    hidden = HIDDEN_BYTES * shape.hidden * scale
    if fast:
        return int(tokens * shape.layers * (FAST_INNER_BYTES * shape.inner * scale + hidden))
    elements = shape.inner * shape.state
    kept = SLOW_STATE_BYTES_FP32 + (SLOW_STATE_CAST_BYTES if dtype_bytes < 4 else 0)
    per_layer = kept * elements + SLOW_INNER_BYTES * shape.inner * scale + hidden
    return int(tokens * (shape.layers * per_layer + SLOW_LAYER_TRANSIENT_BYTES * elements))


def cpu_activation_bytes(shape: MambaShape, tokens: int) -> int:
    """Activations of one micro-batch on the CPU (the slow path, as measured there), excluding logits."""
    elements = shape.inner * shape.state
    return tokens * elements * (CPU_SLOW_LAYER_BYTES * shape.layers + CPU_SLOW_TRANSIENT_BYTES)
