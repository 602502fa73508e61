"""Static memory prior: a training job's peak GPU memory and host RSS, estimated from its config.

Why: admission (:mod:`lat_core.engine.admission`) must know what a job will need before it starts. A peak
measured before is best and a sibling's is next; for a config never run, this prior lets unmeasured
jobs whose estimates fit start together, instead of queueing behind the first one's first step.
It imports no torch: it reads the job's ``job.yaml`` (through the one job schema the trainer uses,
lat_core.config.job, so the config it sizes is the one the trainer will train), the
model's ``config.json`` and the headers of its safetensors files.

The estimate is deliberately high: every sequence is taken at ``max_seq_len`` (for single-sentence
data at most SINGLE_SENTENCE_MAX_TOKENS: :func:`row_tokens`) and every position gets logits. It is ``None`` (unknown, so admission staggers as before)
wherever it is not calibrated: DoRA, SDLoRA, GLA configs with softmax-attention layers, hub ids not in
the local Hugging Face cache, unreadable files. Mamba's activations are counted in
:mod:`lat_core.config.mamba_memory` (transformers' slow path keeps rows x tokens x d_inner x state
float32 tensors per layer; the fast path far less).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, NamedTuple

import yaml

from lat_core.config.hub_cache import hub_cache_dirs
from lat_core.contract.jobdir import JobDir
from lat_core.config.job import TINY, TINY_DEFAULTS, JobConfig, PeftConfig, parse_config
from lat_core.config.datasets import SINGLE_SENTENCE_MAX_TOKENS, single_sentence
from lat_core.config.mamba_memory import (MambaShape, cpu_activation_bytes as mamba_cpu_activations,
                                          fast_path_expected, gpu_activation_bytes as mamba_gpu_activations,
                                          mamba_shape)

GiB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# Activation bytes per (token x hidden x layer) in bf16, and logit bytes per (token x vocab).
# Calibrated on an H200 (bench/bench_gla_lora.py; torch.cuda.max_memory_allocated) with the
# GLA-1.3B architecture (1,368 M parameters with LoRA r8 on q/k/v/o; weights 2.55 GiB in bf16),
# random tokens filling all 256 positions:
#   batch 4 x 256, checkpointing off: 4.7 GiB -> ~2.11 MiB of activations per token
#   batch 64 x 256, checkpointing off: 34.8 GiB -> ~2.01 MiB per token
#   batch 4 x 256, checkpointing on:  3.1 GiB -> ~0.51 MiB per token
# Logits: bf16 logits (2 bytes) plus an fp32 copy for the loss and its gradient (8 bytes) per vocab
# entry. What is left per token, over hidden 2048 x 24 layers, is ~36-39 bytes without checkpointing
# (40 taken) and ~2.7 bytes with it, where each layer keeps only its input and one layer at a time is
# recomputed with the full 40 (4 taken). These give 4.77 / 37.5 / 3.16 GiB for the three points.
ACT_BYTES_PER_TOKEN_HIDDEN_LAYER = 40
CKPT_BYTES_PER_TOKEN_HIDDEN_LAYER = 4
LOGIT_FP32_BYTES_PER_TOKEN_VOCAB = 8  # plus the training dtype's own bytes
# A trainable (adapter) parameter: fp32 weight (PEFT keeps adapters in fp32), fp32 gradient and the
# two fp32 AdamW moments.
TRAINABLE_BYTES = 16
# The journal's measured GPU peaks are NVML per-process used memory: torch's allocations plus the
# CUDA context (~0.5-0.6 GiB on an H200) plus what the caching allocator reserves beyond its peak
# allocation (fragmentation, rounding), taken as 20%.
CUDA_CONTEXT_BYTES = int(0.6 * GiB)
ALLOCATOR_FACTOR = 1.2
# Host RSS. A GPU job's process holds the CUDA runtime, torch, transformers, peft and fla: taken as
# 3 GiB (an assumption, not measured here; the journal's measured peaks replace it after one run);
# a CPU job's holds the libraries without CUDA: 588 MiB measured (/usr/bin/time, peak RSS) for the
# shipped configs/experiments/gla/tiny_lora_qkvo.yaml, 10 steps on this 2-core machine.
GPU_JOB_BASE_RSS = 3 * GiB
CPU_JOB_BASE_RSS = int(0.6 * GiB)
# On the CPU, GLA runs the pure-PyTorch recurrence of train/gla_cpu.py, which keeps fp32 states
# (key_dim x value_dim / heads per token and layer) for the backward pass. Peak RSS measured here
# (fp32, LoRA r8 q/k/v/o, vocab 4100, synthetic 256-word SST-2 sentences, 3 steps) against the prior
# with 3 states: hidden 256 x 4 layers, 4 heads, batch 8 x 256: 1385 MiB (prior 1870); the same with
# 1 head: 3874 MiB (prior 4635; ~2.9 states kept); hidden 512 x 2 layers, 8 heads, 8 x 128: 1122 MiB
# (prior 1280).
CPU_STATES_KEPT = 3
# A tiny-random model without model.tiny.vocab_size takes the word-level tokenizer built from its
# data (small for the shipped data); assumed as large as the real GLA tokenizer.
TINY_VOCAB_ASSUMED = 32000

# fla's GLAConfig defaults (fla 0.6): the GLA-1.3B architecture.
GLA_DEFAULTS = {"hidden_size": 2048, "num_hidden_layers": 24, "num_heads": 4, "num_kv_heads": None,
                "expand_k": 0.5, "expand_v": 1.0, "hidden_ratio": 4, "intermediate_size": None,
                "vocab_size": 32000, "tie_word_embeddings": False, "use_short_conv": False, "conv_size": 4,
                "use_output_gate": True, "attn": None}
GLA_GATE_LOW_RANK_DIM = 16  # fla's GatedLinearAttention gk_proj bottleneck


@dataclass(frozen=True)
class PriorSplit:
    """The static prior's view of one resource: ``base`` paid once per process, and the least a
    member surely adds (its adapter's weights, gradients and AdamW moments: exact, unlike the
    activations, which the prior over-estimates on purpose)."""
    base: int
    member_min: int


class PriorUnknown(ValueError):
    """The config is outside what the prior can estimate; the prior is None."""


@dataclass(frozen=True)
class MemoryPrior:
    """Expected peaks in the units the journal measures (NVML used memory, process-tree RSS)."""
    gpu_bytes: int      # on a GPU job's device
    gpu_job_rss: int    # host RSS of the same job on a GPU
    cpu_job_rss: int    # host RSS when the job trains on the CPU (no GPU memory at all)
    # A fused group pays these once (the frozen weights, the CUDA context, the libraries)...
    gpu_base: int = 0
    cpu_rss_base: int = 0
    # ...and each member at least its adapter's state (exact; its activations are estimated high)
    member_state: int = 0

    def peak(self, on_cpu: bool) -> tuple[int, int]:
        """(GPU bytes, RSS bytes), as admission's estimates are shaped."""
        return (0, self.cpu_job_rss) if on_cpu else (self.gpu_bytes, self.gpu_job_rss)

    def splits(self, on_cpu: bool) -> tuple[PriorSplit, PriorSplit]:
        """(GPU, RSS): what a fused group pays once and what each member adds at least. A GPU
        job's host RSS is all libraries and weights (a member adds no modelled host memory)."""
        if on_cpu:
            return PriorSplit(0, 0), PriorSplit(self.cpu_rss_base, self.member_state)
        return PriorSplit(self.gpu_base, self.member_state), PriorSplit(self.gpu_job_rss, 0)


@dataclass(frozen=True)
class GlaShape:
    """The sizes of a GLA model that its memory depends on."""
    hidden: int
    layers: int
    heads: int
    key_dim: int
    value_dim: int
    kv_groups: int
    intermediate: int
    vocab: int
    tied: bool
    output_gate: bool
    conv_size: int  # 0: no short convolution

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each per-layer nn.Linear, by the short names LoRA targets."""
        k_kv, v_kv = self.key_dim // self.kv_groups, self.value_dim // self.kv_groups
        shapes = {"q_proj": (self.hidden, self.key_dim), "k_proj": (self.hidden, k_kv),
                  "v_proj": (self.hidden, v_kv), "o_proj": (self.value_dim, self.hidden),
                  "gk_proj.0": (self.hidden, GLA_GATE_LOW_RANK_DIM), "gk_proj.1": (GLA_GATE_LOW_RANK_DIM, k_kv),
                  "gate_proj": (self.hidden, self.intermediate), "up_proj": (self.hidden, self.intermediate),
                  "down_proj": (self.intermediate, self.hidden)}
        if self.output_gate:
            shapes["g_proj"] = (self.hidden, self.value_dim)
        return shapes

    def param_count(self) -> int:
        """Parameters of fla's GLAForCausalLM with these sizes (no adapter)."""
        per_layer = sum(i * o for i, o in self.linear_shapes().values())
        per_layer += self.key_dim // self.kv_groups          # gk_proj.1 bias
        per_layer += self.value_dim // self.heads            # the gated output norm's weight
        per_layer += 2 * self.hidden                         # attn_norm, mlp_norm
        if self.conv_size:
            per_layer += (self.key_dim + (self.key_dim + self.value_dim) // self.kv_groups) * self.conv_size
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * per_layer + embeddings + self.hidden  # + the final norm


def gla_shape(config: Mapping[str, Any]) -> GlaShape:
    """Sizes from a GLA config mapping (config.json or model.tiny), fla's defaults for the rest."""
    c = {**GLA_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}  # None: the default
    if c["attn"]:
        raise PriorUnknown("hybrid GLA with softmax-attention layers is not calibrated")
    hidden, heads = int(c["hidden_size"]), int(c["num_heads"])
    kv_heads = int(c["num_kv_heads"] or heads)
    intermediate = c["intermediate_size"]
    if intermediate is None:  # fla's GatedMLP: 2/3 x hidden x ratio, rounded up to a multiple of 256
        intermediate = 256 * math.ceil(int(hidden * (c["hidden_ratio"] or 4) * 2 / 3) / 256)
    return GlaShape(hidden=hidden, layers=int(c["num_hidden_layers"]), heads=heads,
                    key_dim=round(hidden * c["expand_k"]), value_dim=round(hidden * c["expand_v"]),
                    kv_groups=heads // kv_heads, intermediate=int(intermediate), vocab=int(c["vocab_size"]),
                    tied=bool(c["tie_word_embeddings"]), output_gate=bool(c["use_output_gate"]),
                    conv_size=int(c["conv_size"]) if c["use_short_conv"] else 0)


# ----------------------------------------------------------------------------- where the model is

def cached_snapshot(repo_id: str, environ: Mapping[str, str]) -> Path | None:
    """The cached snapshot of a hub model (``models--org--name/snapshots/<rev>``): the revision
    ``refs/main`` names, else the newest snapshot holding a config.json; None when not cached."""
    folder = "models--" + repo_id.replace("/", "--")
    for cache in hub_cache_dirs(environ):
        repo = cache / folder
        ref = repo / "refs" / "main"
        if ref.is_file():
            snapshot = repo / "snapshots" / ref.read_text().strip()
            if (snapshot / "config.json").is_file():
                return snapshot
        snapshots = [s for s in (repo / "snapshots").glob("*") if (s / "config.json").is_file()]
        if snapshots:
            return max(snapshots, key=lambda s: s.stat().st_mtime)
    return None


def model_dir(name_or_path: str, environ: Mapping[str, str]) -> Path | None:
    """A local save_pretrained directory, or the hub id's cached snapshot (as from_pretrained
    would find it offline); None when neither holds a config.json."""
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        return local if (local / "config.json").is_file() else None
    if name_or_path.count("/") == 1 and not name_or_path.startswith(("/", ".", "~")):
        return cached_snapshot(name_or_path, environ)
    return None


def safetensors_params(folder: Path) -> int | None:
    """Parameters stored in the folder's safetensors files, from their JSON headers (each file: an
    8-byte little-endian header length, then a JSON map of tensor name -> dtype, shape, offsets)."""
    total, files = 0, sorted(folder.glob("*.safetensors"))
    for path in files:
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if not 0 < size <= 100 * 2**20:
                raise PriorUnknown(f"{path.name}: not a safetensors header")
            header = json.loads(fh.read(size))
        total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    return total if files else None


# ----------------------------------------------------------------------------- the estimate

SHAPES: dict[str, Callable[[Mapping[str, Any]], GlaShape | MambaShape]] = {"gla": gla_shape, "mamba": mamba_shape}


@dataclass(frozen=True)
class ModelFacts:
    shape: GlaShape | MambaShape
    params: int        # base model parameters (no adapter)
    pretrained: bool   # loaded by from_pretrained: the weights pass through host memory first


def model_facts(cfg: JobConfig, environ: Mapping[str, str]) -> ModelFacts:
    """The model's sizes, from model.tiny (tiny-random) or the checkpoint's files."""
    family = cfg.model.family
    if family not in SHAPES:
        raise PriorUnknown(f"{family} is not calibrated")
    if cfg.model.name_or_path == TINY:  # sized like models._tiny_model (untied, vocab from the data)
        sizes = {**TINY_DEFAULTS[family], "vocab_size": TINY_VOCAB_ASSUMED, **cfg.model.tiny}
        shape = SHAPES[family]({**sizes, "tie_word_embeddings": False})
        return ModelFacts(shape, shape.param_count(), pretrained=False)
    folder = model_dir(cfg.model.name_or_path, environ)
    if folder is None:
        raise PriorUnknown(f"{cfg.model.name_or_path}: no local copy")
    shape = SHAPES[family](json.loads((folder / "config.json").read_text()))
    stored = safetensors_params(folder)
    return ModelFacts(shape, stored if stored is not None else shape.param_count(), pretrained=True)


def trainable_params(shape: GlaShape | MambaShape, peft: PeftConfig) -> int:
    """LoRA parameters: r x (in + out) per targeted module per layer (all layers counted, an upper
    bound when peft.layers picks some). DoRA's extra activations are not calibrated."""
    if peft.use_dora or peft.method not in ("lora", "rslora", "pissa", "loraga"):
        raise PriorUnknown(f"peft method {peft.method}{' (DoRA)' if peft.use_dora else ''} is not calibrated")
    shapes = shape.linear_shapes()
    total = 0
    for target in peft.target_modules:
        if target == "lm_head":
            total += peft.r * (shape.hidden + shape.vocab)
        elif target in shapes:
            total += peft.r * sum(shapes[target]) * shape.layers
        else:
            raise PriorUnknown(f"unknown target module {target!r}")
    return total


def activation_bytes(shape: GlaShape, tokens: int, dtype_bytes: int, checkpointing: bool) -> int:
    """Peak activations of one micro-batch (see the calibration above; scaled from bf16)."""
    per_token_layer = CKPT_BYTES_PER_TOKEN_HIDDEN_LAYER if checkpointing else ACT_BYTES_PER_TOKEN_HIDDEN_LAYER
    body = per_token_layer * shape.hidden * shape.layers
    if checkpointing:  # the layer being recomputed holds its full activations
        body += ACT_BYTES_PER_TOKEN_HIDDEN_LAYER * shape.hidden
    logits = shape.vocab * (dtype_bytes + LOGIT_FP32_BYTES_PER_TOKEN_VOCAB)
    return tokens * (body * dtype_bytes // 2 + logits)


def cpu_recurrence_bytes(shape: GlaShape, tokens: int) -> int:
    """The CPU path's fp32 recurrence states kept for backward (GPU kernels keep none per token)."""
    return tokens * shape.layers * CPU_STATES_KEPT * 4 * shape.key_dim * shape.value_dim // shape.heads


def loraga_bytes(facts: ModelFacts, cfg: JobConfig, dtype_bytes: int) -> int:
    """LoRA-GA's set-up: a gradient of every targeted base weight, plus its fp32 copy."""
    if cfg.peft.init_lora_weights != "loraga":
        return 0
    shapes = facts.shape.linear_shapes()
    weights = sum(math.prod(shapes[t]) * facts.shape.layers for t in cfg.peft.target_modules if t in shapes)
    return weights * (dtype_bytes + 4)


class Activations(NamedTuple):
    """One micro-batch's activations: ``scaled`` bytes get the allocator's 20%, ``counted`` bytes
    were checked as they are against a measured peak (Mamba's slow-path states)."""
    gpu_scaled: int
    gpu_counted: int
    cpu_scaled: int
    cpu_counted: int


def gla_activations(shape: GlaShape, tokens: int, dtype_bytes: int, checkpointing: bool) -> Activations:
    gpu = activation_bytes(shape, tokens, dtype_bytes, checkpointing)
    return Activations(gpu, 0, gpu + cpu_recurrence_bytes(shape, tokens), 0)


def mamba_activations(shape: MambaShape, tokens: int, dtype_bytes: int, checkpointing: bool) -> Activations:
    """Mamba's, from :mod:`lat_core.config.mamba_memory`; with checkpointing each layer keeps its
    input and one layer at a time is recomputed with its full activations (as a 1-layer model)."""
    logits = tokens * shape.vocab * (dtype_bytes + LOGIT_FP32_BYTES_PER_TOKEN_VOCAB)
    body, inputs = shape, 0
    if checkpointing:
        body, inputs = replace(shape, layers=1), tokens * shape.hidden * dtype_bytes * shape.layers
    gpu = mamba_gpu_activations(body, tokens, dtype_bytes, fast=fast_path_expected())
    return Activations(logits + inputs, gpu, logits + inputs, mamba_cpu_activations(body, tokens))


def row_tokens(cfg: JobConfig) -> int:
    """The widest row the job pads to: ``max_seq_len``, or less for single-sentence data, whose
    rows never come near it (Mamba's slow path, linear in it, was sized 10x too high for SST-2)."""
    if single_sentence(cfg.data):
        return min(cfg.train.max_seq_len, SINGLE_SENTENCE_MAX_TOKENS)
    return cfg.train.max_seq_len


def estimate(cfg: JobConfig, environ: Mapping[str, str]) -> MemoryPrior:
    """The prior for a parsed job config; raises PriorUnknown outside what it models."""
    facts = model_facts(cfg, environ)
    dtype_bytes = DTYPE_BYTES[cfg.model.dtype]
    tokens = cfg.train.batch_size * row_tokens(cfg)  # micro-batch; accumulation adds nothing
    weights = facts.params * dtype_bytes
    state = trainable_params(facts.shape, cfg.peft) * TRAINABLE_BYTES + loraga_bytes(facts, cfg, dtype_bytes)
    checkpointing = cfg.train.gradient_checkpointing
    if isinstance(facts.shape, MambaShape):
        acts = mamba_activations(facts.shape, tokens, dtype_bytes, checkpointing)
    else:
        acts = gla_activations(facts.shape, tokens, dtype_bytes, checkpointing)
    allocated = weights + state + acts.gpu_scaled
    cpu_allocated = weights + state + acts.cpu_scaled
    return MemoryPrior(gpu_bytes=int(allocated * ALLOCATOR_FACTOR) + acts.gpu_counted + CUDA_CONTEXT_BYTES,
                       gpu_job_rss=GPU_JOB_BASE_RSS + (weights if facts.pretrained else 0),
                       cpu_job_rss=CPU_JOB_BASE_RSS + int(cpu_allocated * ALLOCATOR_FACTOR) + acts.cpu_counted,
                       gpu_base=int(weights * ALLOCATOR_FACTOR) + CUDA_CONTEXT_BYTES,
                       cpu_rss_base=CPU_JOB_BASE_RSS + int(weights * ALLOCATOR_FACTOR),
                       member_state=int(state * ALLOCATOR_FACTOR))


def job_prior(job_dir: str | Path, job_env: Mapping[str, str],
              environ: Mapping[str, str] | None = None) -> MemoryPrior | None:
    """The prior of the job whose resolved config is ``job_dir/job.yaml``, with the environment the
    trainer will see (the engine's, then the job's own variables); None when it cannot be estimated.
    Never raises for a bad file: a prior is advice, and admission must go on without it."""
    environ = {**(os.environ if environ is None else environ), **job_env}
    path = JobDir(job_dir).job_yaml
    try:
        cfg = parse_config(yaml.safe_load(path.read_text()), path, environ=environ)
        return estimate(cfg, environ)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, ArithmeticError, yaml.YAMLError):
        # TrainConfigError, PriorUnknown and bad JSON are ValueErrors; the rest: malformed mappings
        return None
