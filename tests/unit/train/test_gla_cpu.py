"""The pure-PyTorch GLA path must match fla's own float32 reference (naive_recurrent_gla)."""
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("fla")
from fla.ops.gla.naive import naive_recurrent_gla  # noqa: E402

from lat_core.train import gla_cpu  # noqa: E402

ATOL = 1e-5


def _inputs(b, t, h, dk, dv, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, t, h, dk, generator=g) for _ in range(2))
    v = torch.randn(b, t, h, dv, generator=g)
    gk = F.logsigmoid(torch.randn(b, t, h, dk, generator=g)) / 4
    xs = [q, k, v, gk]
    if requires_grad:
        for x in xs:
            x.requires_grad_(True)
    return xs


@pytest.mark.parametrize("shape", [(1, 1, 1, 4, 4), (2, 7, 2, 8, 16), (3, 33, 4, 16, 8), (1, 70, 2, 32, 32)])
@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("fn", ["fused_recurrent", "chunk"])
def test_matches_naive(shape, with_h0, fn):
    b, t, h, dk, dv = shape
    q, k, v, gk = _inputs(b, t, h, dk, dv)
    h0 = torch.randn(b, h, dk, dv) if with_h0 else None
    ref_o, ref_h = naive_recurrent_gla(q, k, v, gk, initial_state=h0, output_final_state=True)
    if fn == "chunk":
        o, ht = gla_cpu.chunk_gla_cpu(q, k, v, gk, initial_state=h0, output_final_state=True)
    else:
        o, ht = gla_cpu.fused_recurrent_gla_cpu(q, k, v, gk, initial_state=h0, output_final_state=True)
    torch.testing.assert_close(o, ref_o, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(ht, ref_h, atol=ATOL, rtol=1e-5)


def test_state_v_first_transposes_state():
    q, k, v, gk = _inputs(2, 9, 2, 8, 4)
    h0 = torch.randn(2, 2, 8, 4)
    ref_o, ref_h = naive_recurrent_gla(q, k, v, gk, initial_state=h0, output_final_state=True)
    o, ht = gla_cpu.fused_recurrent_gla_cpu(q, k, v, gk, initial_state=h0.transpose(-1, -2),
                                            output_final_state=True, state_v_first=True)
    torch.testing.assert_close(o, ref_o, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(ht, ref_h.transpose(-1, -2), atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("lens", [[5, 1, 12], [16, 16], [3, 40, 7, 2]])
def test_varlen_matches_per_sequence_naive(lens, with_h0):
    h, dk, dv = 2, 8, 8
    seqs = [_inputs(1, n, h, dk, dv, seed=i + 1) for i, n in enumerate(lens)]
    packed = [torch.cat([s[j] for s in seqs], dim=1) for j in range(4)]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.long)
    h0 = torch.randn(len(lens), h, dk, dv) if with_h0 else None
    for fn in (gla_cpu.fused_recurrent_gla_cpu, gla_cpu.chunk_gla_cpu):
        o, ht = fn(*packed, initial_state=h0, output_final_state=True, cu_seqlens=cu)
        assert o.shape == packed[2].shape
        for i, s in enumerate(seqs):
            ref_o, ref_h = naive_recurrent_gla(*s, initial_state=None if h0 is None else h0[i:i + 1],
                                               output_final_state=True)
            torch.testing.assert_close(o[:, cu[i]:cu[i + 1]], ref_o, atol=ATOL, rtol=1e-5)
            torch.testing.assert_close(ht[i:i + 1], ref_h, atol=ATOL, rtol=1e-5)


def test_gradients_match_naive():
    xs = _inputs(2, 11, 2, 8, 8, requires_grad=True)
    h0 = torch.randn(2, 2, 8, 8, requires_grad=True)
    o, ht = gla_cpu.fused_recurrent_gla_cpu(*xs, initial_state=h0, output_final_state=True)
    (o.square().sum() + ht.sum()).backward()
    grads = [x.grad.clone() for x in xs + [h0]]
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)
    for x in xs + [h0]:
        x.grad = None
    ref_o, ref_h = naive_recurrent_gla(*xs, initial_state=h0, output_final_state=True)
    (ref_o.square().sum() + ref_h.sum()).backward()
    for g, x in zip(grads, xs + [h0]):
        torch.testing.assert_close(g, x.grad, atol=1e-4, rtol=1e-4)


def test_rms_norm_gated_matches_formula():
    g = torch.Generator().manual_seed(3)
    x, gate = torch.randn(4, 5, 16, generator=g), torch.randn(4, 5, 16, generator=g)
    w, eps = torch.randn(16, generator=g), 1e-6
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w * gate * torch.sigmoid(gate)
    torch.testing.assert_close(gla_cpu.rms_norm_cpu(x, w, None, eps=eps, gate=gate), expected)
    expected_sig = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w * torch.sigmoid(gate)
    torch.testing.assert_close(gla_cpu.rms_norm_cpu(x, w, None, eps=eps, gate=gate, activation="sigmoid"),
                               expected_sig)


def test_rms_norm_prenorm_residual():
    x, r, w = torch.randn(3, 8), torch.randn(3, 8), torch.rand(8)
    y, res = gla_cpu.rms_norm_cpu(x, w, None, residual=r, eps=1e-5, prenorm=True)
    s = x + r
    torch.testing.assert_close(res, s)
    torch.testing.assert_close(y, s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * w)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU path is only installed without CUDA")
def test_tiny_gla_model_runs_on_cpu_with_padding():
    from fla.models import GLAConfig, GLAForCausalLM
    assert gla_cpu.enable_cpu_gla()
    torch.manual_seed(0)
    model = GLAForCausalLM(GLAConfig(hidden_size=32, num_hidden_layers=2, num_heads=2, vocab_size=50,
                                     fuse_cross_entropy=False))
    ids = torch.randint(2, 50, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[0, :4] = 0
    logits = model(input_ids=ids, attention_mask=mask).logits
    logits[:, -1].sum().backward()
    assert torch.isfinite(logits).all()
    assert model.model.layers[0].attn.q_proj.weight.grad.abs().sum() > 0
    # left padding must not change the unpadded sequence's outputs
    alone = model(input_ids=ids[:1, 4:]).logits
    torch.testing.assert_close(logits[:1, 4:], alone, atol=1e-4, rtol=1e-4)
