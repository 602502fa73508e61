"""Pure-PyTorch stand-ins for the Triton-only pieces of fla's GLA model.

Why: flash-linear-attention imports on a machine without a GPU, but every
GLA forward pass ends in a Triton kernel (the gated recurrence, the fused
RMSNorm, the fused SwiGLU) and fails with "0 active drivers".  To fine-tune
and test GLA on the CPU we swap those names for plain PyTorch versions that
take the same arguments and return the same things.  Autograd gives the
backward pass for free.

`enable_cpu_gla()` installs the patches; it is called by the trainer only when
`torch.cuda.is_available()` is False and refuses to patch on a GPU machine, so
the real kernels are always used where they can run.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

_ORIGINALS: dict[tuple[object, str], object] = {}


# --------------------------------------------------------------------------
# Gated linear attention recurrence
# --------------------------------------------------------------------------

def _recurrence(q, k, v, gk, gv, scale, h0, reverse):
    """Run h_t = diag(exp(gk_t)) h_{t-1} diag(exp(gv_t)) + k_t^T v_t, o_t = scale q_t h_t.

    Shapes are [N, T, H, K] / [N, T, H, V]; h0 is [N, H, K, V] or None.  All
    math in float32 (fla's reference does the same).  Returns o [N, T, H, V]
    in float32 and the final state [N, H, K, V].
    """
    n, t_len, h, dk = q.shape
    dv = v.shape[-1]
    h_state = q.new_zeros(n, h, dk, dv, dtype=torch.float32) if h0 is None else h0.float()
    outs = [None] * t_len
    steps = range(t_len - 1, -1, -1) if reverse else range(t_len)
    for t in steps:
        decay = None
        if gk is not None:
            decay = gk[:, t].exp().unsqueeze(-1)            # [N, H, K, 1]
        if gv is not None:
            dv_gate = gv[:, t].exp().unsqueeze(-2)          # [N, H, 1, V]
            decay = dv_gate if decay is None else decay * dv_gate
        if decay is not None:
            h_state = h_state * decay
        h_state = h_state + k[:, t].unsqueeze(-1) * v[:, t].unsqueeze(-2)
        outs[t] = torch.einsum('nhk,nhkv->nhv', q[:, t] * scale, h_state)
    return torch.stack(outs, dim=1), h_state


def _pack_varlen(x, cu, t_max):
    """[1, total, H, D] + cu_seqlens -> right-padded [N, t_max, H, D] (zeros in pads).

    Zero k, v and zero log-gates in the pad slots leave the state untouched, so
    the state after t_max steps is the state after each sequence's last token.
    """
    n = cu.numel() - 1
    out = x.new_zeros(n, t_max, *x.shape[2:])
    for i in range(n):
        s, e = int(cu[i]), int(cu[i + 1])
        out[i, : e - s] = x[0, s:e]
    return out


def _unpack_varlen(x, cu):
    """Inverse of `_pack_varlen` for the outputs: [N, t_max, H, V] -> [1, total, H, V]."""
    parts = [x[i, : int(cu[i + 1]) - int(cu[i])] for i in range(cu.numel() - 1)]
    return torch.cat(parts, dim=0).unsqueeze(0)


def gla_recurrent_cpu(
    q, k, v, gk=None, gv=None, scale=None, initial_state=None, output_final_state=False,
    reverse=False, state_v_first=False, cu_seqlens=None,
):
    """Common body of the three GLA entry points (chunk / fused_chunk / fused_recurrent).

    Chunked and recurrent forms compute the same function; on the CPU the plain
    recurrence is simplest and exact.  `state_v_first` stores states as [V, K].
    """
    if scale is None:
        scale = q.shape[-1] ** -0.5
    out_dtype = v.dtype
    q, k, v = (x.float() for x in (q, k, v))
    gk = gk.float() if gk is not None else None
    gv = gv.float() if gv is not None else None
    h0 = initial_state
    if h0 is not None and state_v_first:
        h0 = h0.transpose(-1, -2)
    if cu_seqlens is not None:
        if q.shape[0] != 1:
            raise ValueError(f"batch size must be 1 with cu_seqlens, got {q.shape[0]}")
        cu = cu_seqlens.to('cpu', torch.long)
        if h0 is not None and h0.shape[0] != cu.numel() - 1:
            raise ValueError(f"expected {cu.numel() - 1} initial states, got {h0.shape[0]}")
        t_max = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
        if reverse:
            raise NotImplementedError("reverse=True with cu_seqlens is not supported on the CPU path")
        packed = [None if x is None else _pack_varlen(x, cu, t_max) for x in (q, k, v, gk, gv)]
        o, ht = _recurrence(*packed, scale, h0, reverse)
        o = _unpack_varlen(o, cu)
    else:
        o, ht = _recurrence(q, k, v, gk, gv, scale, h0, reverse)
    if not output_final_state:
        ht = None
    elif state_v_first:
        ht = ht.transpose(-1, -2).contiguous()
    return o.to(out_dtype), ht


def fused_recurrent_gla_cpu(q, k, v, gk=None, gv=None, scale=None, initial_state=None,
                            output_final_state=False, reverse=False, state_v_first=False,
                            cu_seqlens=None, **kwargs):
    """Drop-in for `fla.ops.gla.fused_recurrent_gla` (returns (o, final_state))."""
    if 'transpose_state_layout' in kwargs:
        state_v_first = kwargs.pop('transpose_state_layout')
    return gla_recurrent_cpu(q, k, v, gk, gv, scale, initial_state, output_final_state,
                             reverse, state_v_first, cu_seqlens)


def chunk_gla_cpu(q, k, v, g, scale=None, initial_state=None, output_final_state=False,
                  state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """Drop-in for `fla.ops.gla.chunk_gla` (the gate is called `g` there)."""
    return gla_recurrent_cpu(q, k, v, g, None, scale, initial_state, output_final_state,
                             False, state_v_first, cu_seqlens)


def fused_chunk_gla_cpu(q, k, v, g, scale=None, initial_state=None, output_final_state=False,
                        **kwargs):
    """Drop-in for the (deprecated upstream) `fused_chunk_gla`; same math as `chunk_gla`."""
    return chunk_gla_cpu(q, k, v, g, scale, initial_state, output_final_state, **kwargs)


# --------------------------------------------------------------------------
# Norms and SwiGLU
# --------------------------------------------------------------------------

def rms_norm_cpu(x, weight, bias=None, residual=None, eps=1e-5, prenorm=False,
                 residual_in_fp32=False, gate=None, activation='swish'):
    """RMSNorm with optional residual add and output gate, as fla's fused kernels do it.

    y = x / sqrt(mean(x^2) + eps) * weight + bias, then y * g * sigmoid(g)
    (swish/silu) or y * sigmoid(g) (sigmoid).  With `prenorm` also returns the
    (residual-added) input, which is what the next block uses as residual.
    """
    dtype = x.dtype
    if residual is not None:
        x = x.float() + residual.float()
        x = x if residual_in_fp32 else x.to(dtype)
    residual_out = x.float() if residual_in_fp32 else x
    xf = x.float()
    y = xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    if gate is not None:
        gf = gate.float()
        if activation in ('swish', 'silu'):
            y = y * F.silu(gf)
        elif activation == 'sigmoid':
            y = y * torch.sigmoid(gf)
        else:
            raise ValueError(f"unsupported gate activation {activation!r}")
    y = y.to(dtype)
    return (y, residual_out) if prenorm else y


def _rmsnorm_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
    """Replacement for `fla.modules.RMSNorm.forward`."""
    return rms_norm_cpu(x, self.weight, self.bias, residual, self.eps, prenorm, residual_in_fp32)


def _rmsnorm_gated_forward(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
    """Replacement for `fla.modules.FusedRMSNormGated.forward`."""
    return rms_norm_cpu(x, self.weight, self.bias, residual, self.eps, prenorm,
                        residual_in_fp32, gate=g, activation=self.activation)


def swiglu_cpu(x, y):
    """silu(x) * y, the unfused SwiGLU."""
    return F.silu(x) * y


def _swiglu_linear_forward(self, x, y, weight, bias):
    """Replacement for `fla.modules.mlp.SwiGLULinear.forward`: linear(silu(x) * y)."""
    return F.linear(swiglu_cpu(x, y), weight, bias)


# --------------------------------------------------------------------------
# Install / remove
# --------------------------------------------------------------------------

def _patch(owner, name, value):
    key = (owner, name)
    if key not in _ORIGINALS:
        _ORIGINALS[key] = getattr(owner, name)
    setattr(owner, name, value)


def enable_cpu_gla(force: bool = False) -> bool:
    """Point the names fla's GLA layer and modules look up at the CPU versions.

    Returns True when patches are in place.  Does nothing on a CUDA machine
    (unless `force`, used only by tests comparing the two paths).
    """
    if torch.cuda.is_available() and not force:
        return False
    import fla.layers.gla as gla_layer
    import fla.modules.mlp as fla_mlp
    from fla.modules import FusedRMSNormGated, RMSNorm

    _patch(gla_layer, 'chunk_gla', chunk_gla_cpu)
    _patch(gla_layer, 'fused_chunk_gla', fused_chunk_gla_cpu)
    _patch(gla_layer, 'fused_recurrent_gla', fused_recurrent_gla_cpu)
    _patch(RMSNorm, 'forward', _rmsnorm_forward)
    _patch(FusedRMSNormGated, 'forward', _rmsnorm_gated_forward)
    _patch(fla_mlp.SwiGLULinear, 'forward', _swiglu_linear_forward)
    _patch(fla_mlp, 'swiglu', swiglu_cpu)
    return True


def disable_cpu_gla() -> None:
    """Undo `enable_cpu_gla` (restore fla's own functions)."""
    for (owner, name), value in _ORIGINALS.items():
        setattr(owner, name, value)
    _ORIGINALS.clear()


def is_enabled() -> bool:
    """True while the CPU patches are installed."""
    return bool(_ORIGINALS)
