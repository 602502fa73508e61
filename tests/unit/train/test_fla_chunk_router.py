"""fla_gla.train_short_rows_in_chunks: training forwards of short GLA rows run fla's chunk kernel
(fla's layer would pick its recurrent decoding kernel for rows of 64 tokens or fewer), everything
else keeps fla's choice."""
import types

import torch

from lat_core.train.fla_gla import gla_classes, train_short_rows_in_chunks


def fake_layer_module(calls: list):
    def fused_recurrent_gla(q, k, v, gk=None, initial_state=None, output_final_state=False, state_v_first=False,
                            cu_seqlens=None, **kwargs):
        calls.append(("recurrent", gk, output_final_state, state_v_first, cu_seqlens, kwargs))
        return "recurrent", None

    def chunk_gla(q, k, v, g, initial_state=None, output_final_state=False, state_v_first=False, cu_seqlens=None):
        calls.append(("chunk", g, output_final_state, state_v_first, cu_seqlens, {}))
        return "chunk", None

    return types.SimpleNamespace(fused_recurrent_gla=fused_recurrent_gla, chunk_gla=chunk_gla)


def test_training_goes_to_chunks_and_the_rest_keeps_flas_kernel():
    calls = []
    layer = fake_layer_module(calls)
    assert train_short_rows_in_chunks(layer) is True
    assert train_short_rows_in_chunks(layer) is False   # installed once, not wrapped twice
    route = layer.fused_recurrent_gla
    gk = object()
    args = dict(q=1, k=2, v=3, gk=gk, initial_state=None, state_v_first=True, cu_seqlens="cu")
    assert route(**args, output_final_state=False)[0] == "chunk"
    assert calls[-1] == ("chunk", gk, False, True, "cu", {})           # the gate passed as chunk_gla's g
    with torch.no_grad():                                               # evaluation, generation
        assert route(**args, output_final_state=False)[0] == "recurrent"
    assert route(**args, output_final_state=True)[0] == "recurrent"     # decoding keeps its state
    assert route(**args, output_final_state=False, gv=gk)[0] == "recurrent"   # an argument chunk_gla lacks
    assert calls[-1][-1] == {"gv": gk}


def test_the_chunk_kernel_is_looked_up_when_called():
    """gla_cpu swaps the layer's kernel names for CPU stand-ins; the router must reach those."""
    calls = []
    layer = fake_layer_module(calls)
    train_short_rows_in_chunks(layer)
    layer.chunk_gla = lambda **kw: ("replaced", None)
    assert layer.fused_recurrent_gla(q=1, k=2, v=3, gk=4)[0] == "replaced"


def test_a_real_gla_layer_trains_a_short_row_through_the_router(monkeypatch):
    """fla's own GLA layer calls the router with the arguments it accepts (CPU stand-ins for the
    Triton kernels): a 16-token row in training goes to chunk_gla with the recurrent result."""
    from lat_core.train.gla_cpu import disable_cpu_gla, enable_cpu_gla, is_enabled

    GLAConfig, GLAForCausalLM = gla_classes()
    import fla.layers.gla as layer

    was_enabled = is_enabled()
    enable_cpu_gla(force=True)
    monkeypatch.setattr(layer, "fused_recurrent_gla", layer.fused_recurrent_gla)   # restored after the test
    monkeypatch.setattr(layer, "chunk_gla", layer.chunk_gla)
    try:
        torch.manual_seed(0)
        model = GLAForCausalLM(GLAConfig(hidden_size=32, num_hidden_layers=1, num_heads=2, vocab_size=50,
                                         use_cache=False))
        ids = torch.randint(0, 50, (2, 16))
        recurrent_out = model(input_ids=ids).logits                   # fla's choice: recurrent for 16 tokens
        used = []
        chunk = layer.chunk_gla
        monkeypatch.setattr(layer, "chunk_gla", lambda **kw: used.append(kw["q"].shape) or chunk(**kw))
        assert train_short_rows_in_chunks() is True
        routed_out = model(input_ids=ids).logits
        assert used and used[0][1] == 16
        torch.testing.assert_close(routed_out, recurrent_out, rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            used.clear()
            model(input_ids=ids)
            assert not used                                            # evaluation keeps fla's kernel
    finally:
        if not was_enabled:
            disable_cpu_gla()
