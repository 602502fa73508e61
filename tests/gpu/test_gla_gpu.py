"""On a CUDA machine, fla's Triton GLA kernels must agree with the CPU reference path."""
import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
pytest.importorskip("fla")


def _inputs(b, t, h, dk, dv, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k = (torch.randn(b, t, h, dk, device="cuda", generator=g) for _ in range(2))
    v = torch.randn(b, t, h, dv, device="cuda", generator=g)
    gk = F.logsigmoid(torch.randn(b, t, h, dk, device="cuda", generator=g)) / 16
    return [x.requires_grad_(True) for x in (q, k, v, gk)]


def _close(got, ref, tol):
    """Max error relative to the reference's largest magnitude: the Triton kernels use TF32
    matmuls, so elementwise rtol is meaningless where outputs are near zero."""
    err = (got.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item() + 1e-6
    assert err / scale < tol, f"relative max error {err / scale:.2e} >= {tol}"


def _grads(fn, xs, h0):
    o, ht = fn(*xs, initial_state=h0, output_final_state=True)
    (o.square().sum() + ht.sum()).backward()
    grads = [x.grad.clone() for x in xs]
    for x in xs:
        x.grad = None
    return o.detach(), ht.detach(), grads


@pytest.mark.parametrize("kernel", ["chunk_gla", "fused_recurrent_gla"])
@pytest.mark.parametrize("shape", [(2, 64, 2, 32, 32), (1, 200, 4, 64, 64)])
@pytest.mark.parametrize("with_h0", [False, True])
def test_triton_matches_cpu_reference(kernel, shape, with_h0):
    import fla.ops.gla as ops

    from lat_core.train import gla_cpu
    assert not gla_cpu.is_enabled()
    b, t, h, dk, dv = shape
    xs = _inputs(b, t, h, dk, dv)
    h0 = torch.randn(b, h, dk, dv, device="cuda") if with_h0 else None
    ref = _grads(gla_cpu.chunk_gla_cpu, xs, h0)
    got = _grads(getattr(ops, kernel), xs, h0)
    _close(got[0], ref[0], 5e-3)
    _close(got[1], ref[1], 5e-3)
    for g_got, g_ref in zip(got[2], ref[2]):
        _close(g_got, g_ref, 1e-2)


@pytest.mark.parametrize("kernel", ["chunk_gla", "fused_recurrent_gla"])
def test_triton_varlen_matches_cpu_reference(kernel):
    import fla.ops.gla as ops

    from lat_core.train import gla_cpu
    lens = [13, 64, 1, 90]
    xs = [x.detach() for x in _inputs(1, sum(lens), 2, 32, 32, seed=5)]
    cu = torch.tensor([0, 13, 77, 78, 168], device="cuda")
    h0 = torch.randn(len(lens), 2, 32, 32, device="cuda")
    o_ref, h_ref = gla_cpu.chunk_gla_cpu(*xs, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    o, ht = getattr(ops, kernel)(*xs, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    _close(o, o_ref, 5e-3)
    _close(ht, h_ref, 5e-3)


def test_enable_cpu_gla_is_a_noop_on_gpu():
    from lat_core.train import gla_cpu
    assert gla_cpu.enable_cpu_gla() is False and not gla_cpu.is_enabled()
