"""LoRA-family adapters: LoRA, DoRA, rsLoRA, PiSSA (through PEFT), LoRA-GA and SDLoRA (here).

LoRA-GA: gradients of the frozen base weights on a few training batches are decomposed by SVD;
B takes the top-r left singular vectors and A the next r right singular vectors (scaled), and the
base weight is replaced by W - s*B@A so the model's output at step 0 is unchanged.  The scaling is
the LoRA-GA authors' "stable" one (github.com/Outsider565/LoRA-GA): A and B both times
c = out_dim**0.25 / sqrt(gamma), no singular values.

Why not PEFT's LoRA-GA (peft.preprocess_loraga + init_lora_weights="lora_ga", PEFT 0.21): on the
tiny GLA model with the same weights and batches (tests/integration/test_loraga_vs_peft.py) its
gradient estimate equals ours exactly (relative difference 0.0), but its initialisation does not:
its default direction ArB2r takes other singular vectors (A = Vh[:r], B = U[:, r:2r]) and its
"stable" scale multiplies B by c * diag(S) and leaves A unscaled.  Worst layer, relative Frobenius
difference from ours: A 1.96, B 1.01, B@A and the base-weight shift 1.02.  With its direction A2rBr
(our vectors) A = ours / c (2.8e-5) and B = ours * diag(S[:r]) (8e-7), so the gap is exactly that
scaling, which is not the reference code's and no LoraGAConfig option removes.

SDLoRA (Mamba): a warm-up of `sdlora_warmup_steps` trains the SSM parameters (A_log, D, dt_proj
bias) alone; per layer the channels (and A_log state dimensions) that moved most are selected, the
warm-up is undone, and the real run trains LoRA on the projections plus the selected SSM entries
(gradients of the others are masked to zero, weight decay off for them).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from lat_core.config.job import JobConfig, TrainConfigError

MAMBA_REFUSED = {
    "out_proj": "LoRA on Mamba's out_proj is refused: the CUDA fast path reads out_proj.weight directly "
                "(mamba_inner_fn), so the adapter would silently not apply; target in_proj/x_proj",
    "dt_proj": "LoRA on Mamba's dt_proj is refused: the selective-scan paths use dt_proj.weight "
               "directly, bypassing the adapter; use peft.method sdlora to tune dt channels",
}


def layer_indices(spec, n_layers: int) -> list[int] | None:
    """`first2`, `last2`, `0-3`, `5`, or a list of ints -> layer indices (None = all)."""
    if spec in (None, "", "all"):
        return None
    if isinstance(spec, list):
        idx = [int(x) for x in spec]
    elif isinstance(spec, int):
        idx = [spec]
    else:
        s = str(spec).strip().lower()
        try:
            if s.startswith("first"):
                idx = list(range(int(s[5:])))
            elif s.startswith("last"):
                idx = list(range(n_layers - int(s[4:]), n_layers))
            elif "-" in s:
                a, b = s.split("-")
                idx = list(range(int(a), int(b) + 1))
            else:
                idx = [int(x) for x in s.split(",")]
        except ValueError:
            raise TrainConfigError(f"peft.layers: cannot read {spec!r} (use first2, last2, 0-3 or a list)") from None
    bad = [i for i in idx if not 0 <= i < n_layers]
    if bad or not idx:
        raise TrainConfigError(f"peft.layers: {spec!r} selects layers {idx} but the model has {n_layers}")
    return idx


def check_refusals(model: nn.Module, cfg: JobConfig) -> None:
    targets = cfg.peft.target_modules
    if cfg.model.family == "mamba":
        for t in targets:
            if t.split(".")[-1] in MAMBA_REFUSED:
                raise TrainConfigError(f"peft.target_modules: {MAMBA_REFUSED[t.split('.')[-1]]}")
    if cfg.model.family == "gla" and "down_proj" in targets:
        fused = getattr(model.config, "fuse_swiglu", False)
        if fused:
            raise TrainConfigError(
                "peft.target_modules: down_proj (MLP) with GLA_USE_FUSED_SWIGLU=1 is refused: fla's fused "
                "SwiGLU reads down_proj.weight directly, so the LoRA would be silently skipped; "
                "unset GLA_USE_FUSED_SWIGLU or drop down_proj/MLP")


def init_mode(cfg: JobConfig, environ: dict):
    """PEFT's init_lora_weights; HP_PISSA_FAST=1 turns plain pissa into a fast 4-iteration SVD."""
    init = cfg.peft.init_lora_weights
    if init == "loraga":
        return True
    if init == "pissa" and environ.get("HP_PISSA_FAST", "") in ("1", "true", "yes", "on"):
        return "pissa_niter_4"
    return init


def lora_config(cfg: JobConfig, n_layers: int, environ: dict):
    from peft import LoraConfig
    p = cfg.peft
    layers = layer_indices(p.layers, n_layers)
    kwargs = dict(r=p.r, lora_alpha=p.alpha, lora_dropout=p.dropout, target_modules=list(p.target_modules),
                  bias="none", task_type="CAUSAL_LM", use_dora=p.use_dora, use_rslora=p.use_rslora,
                  init_lora_weights=init_mode(cfg, environ))
    if layers is not None:
        kwargs.update(layers_to_transform=layers, layers_pattern="layers")
    return LoraConfig(**kwargs)


def lora_layers(model: nn.Module):
    """(name without the peft prefix, LoraLayer) for every adapted module."""
    from peft.tuners.lora import LoraLayer
    for name, mod in model.named_modules():
        if isinstance(mod, LoraLayer):
            yield name.replace("base_model.model.", "", 1), mod


# ----------------------------------------------------------------------------- LoRA-GA

def estimate_gradients(model: nn.Module, batches, loss_fn) -> dict[str, torch.Tensor]:
    """Mean gradient of every adapted layer's frozen base weight, adapters disabled."""
    weights = {n: layer.get_base_layer().weight for n, layer in lora_layers(model)}
    saved = {n: p.requires_grad for n, p in model.named_parameters()}
    for p in model.parameters():
        p.requires_grad_(False)
    for w in weights.values():
        w.requires_grad_(True)
        w.grad = None
    count = 0
    with model.disable_adapter():
        for batch in batches:
            loss_fn(model, batch).backward()
            count += 1
    grads = {n: w.grad.detach().float() / max(1, count) for n, w in weights.items()}
    for n, p in model.named_parameters():
        p.grad = None
        p.requires_grad_(saved[n])
    return grads


def apply_loraga(model: nn.Module, grads: dict[str, torch.Tensor], gamma: float = 16.0) -> int:
    """Set A/B from the SVD of each gradient and fold -s*B@A into the base weight; returns count."""
    done = 0
    for name, layer in lora_layers(model):
        if name not in grads:
            continue
        g = grads[name]
        base_w = layer.get_base_layer().weight
        out_dim, in_dim = base_w.shape
        r = layer.r["default"]
        scale = layer.scaling["default"]
        u, _, vh = torch.linalg.svd(g, full_matrices=False)
        k = u.shape[1]
        if k < r:
            raise TrainConfigError(f"peft: LoRA-GA needs rank r={r} <= min dims of {name} ({k})")
        a_rows = vh[r:2 * r] if k >= 2 * r else vh[k - r:k]
        c = out_dim ** 0.25 / math.sqrt(gamma)
        b = (u[:, :r] * c).to(base_w.dtype)
        a = (a_rows * c).to(base_w.dtype)
        with torch.no_grad():
            layer.lora_A["default"].weight.copy_(a)
            layer.lora_B["default"].weight.copy_(b)
            base_w.sub_((scale * (b.float() @ a.float())).to(base_w.dtype))
        done += 1
    return done


# ----------------------------------------------------------------------------- SDLoRA

def ssm_params(model: nn.Module, which: list[str]) -> dict[str, nn.Parameter]:
    """Mamba SSM parameters by full name: mixer.A_log, mixer.D, mixer.dt_proj.bias."""
    out = {}
    for name, p in model.named_parameters():
        if ".mixer." in name and "lora_" not in name and any(name.endswith("." + w) for w in which):
            out[name] = p
    return out


def sdlora_select(model: nn.Module, cfg: JobConfig, batches, loss_fn) -> dict[str, torch.Tensor]:
    """Warm-up on the SSM parameters, pick channels/states that moved most, undo; returns masks."""
    p = cfg.peft
    params = ssm_params(model, p.sdlora_params)
    if not params:
        raise TrainConfigError("peft.method sdlora: the model has no Mamba SSM parameters (A_log, D, dt_proj)")
    before = {n: t.detach().clone() for n, t in params.items()}
    flags = {n: q.requires_grad for n, q in model.named_parameters()}
    for q in model.parameters():
        q.requires_grad_(False)
    for t in params.values():
        t.requires_grad_(True)
    opt = torch.optim.AdamW(list(params.values()), lr=cfg.train.lr, weight_decay=0.0)
    for batch in batches:
        opt.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        opt.step()
    delta = {n: (t.detach() - before[n]).abs().float() for n, t in params.items()}
    with torch.no_grad():
        for n, t in params.items():
            t.copy_(before[n])
            t.grad = None
    for n, q in model.named_parameters():
        q.requires_grad_(flags[n])
    # per layer: channel score over all chosen params, state score from A_log
    layers: dict[str, dict[str, str]] = {}
    for n in params:
        prefix = n.split(".mixer.")[0]
        layers.setdefault(prefix, {})[n] = n
    masks = {}
    for prefix, names in layers.items():
        chan = None
        state = None
        for n in names:
            d = delta[n]
            c = d.sum(dim=1) if d.dim() == 2 else d
            c = c / (c.max() + 1e-12)
            chan = c if chan is None else chan + c
            if d.dim() == 2:
                state = d.sum(dim=0)
        k = max(1, math.ceil(p.sdlora_channel_fraction * chan.numel()))
        cmask = torch.zeros_like(chan, dtype=torch.bool)
        cmask[torch.topk(chan, k).indices] = True
        smask = None
        if state is not None:
            ks = max(1, math.ceil(p.sdlora_state_fraction * state.numel()))
            smask = torch.zeros_like(state, dtype=torch.bool)
            smask[torch.topk(state, ks).indices] = True
        for n in names:
            shape = params[n].shape
            masks[n] = (cmask[:, None] & smask[None, :]) if len(shape) == 2 else cmask.clone()
            masks[n] = masks[n].reshape(shape)
    return masks


def enable_sdlora(model: nn.Module, masks: dict[str, torch.Tensor]) -> list[nn.Parameter]:
    """Make the selected SSM parameters trainable with masked gradients; returns them."""
    params = dict(model.named_parameters())
    out = []
    for n, m in masks.items():
        t = params[n]
        t.requires_grad_(True)
        mask = m.to(t.device, t.dtype)
        t.register_hook(lambda g, mask=mask: g * mask)
        out.append(t)
    return out
