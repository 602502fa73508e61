"""Stacked adapters (lat_core/train/fused/stacked.py, members.py) against separate PEFT models: same
outputs, same gradients of every job's A and B, padding that stays zero, PEFT-loadable adapters."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from lat_core.train import data as D
from lat_core.train.fused import members as M
from lat_core.train.fused.stacked import BatchLayout, LayoutSlot, StackedLoRALinear, TokenLayout, adapters_in_tf32
from tests.helpers.fused import base_model, job_cfg, peft_model, randomise_b, tokenizer_and_rows

# ranks, alphas, rsLoRA, target sets and layers all differ; seeds give each its own init
JOBS = [({"r": 4, "alpha": 8}, 11),
        ({"r": 8, "alpha": 8, "use_rslora": True, "target_modules": ["q_proj", "v_proj"]}, 12),
        ({"r": 2, "alpha": 16, "layers": [1], "target_modules": ["k_proj", "o_proj", "up_proj"]}, 13)]


def _group(tmp_path, rows=(3, 5, 2)):
    """(stacked base, layout slot, members, separate PEFT models, per-job examples, label ids)."""
    tok, ids, encoded = tokenizer_and_rows()
    cfgs = [job_cfg(tmp_path, f"j{i}", peft=p) for i, (p, _) in enumerate(JOBS)]
    base = base_model(cfgs[0], tok)
    refs = [peft_model(base, c, seed) for c, (_, seed) in zip(cfgs, JOBS)]
    replayed = []
    for c, (_, seed) in zip(cfgs, JOBS):
        torch.manual_seed(seed)
        replayed.append(M.replay_peft(base, c))
    slot, members = M.install(base, replayed)
    from peft import get_peft_model_state_dict
    for i, (ref, m) in enumerate(zip(refs, members)):
        assert M.state_dict(m).keys() == get_peft_model_state_dict(ref).keys()
        for key, value in M.state_dict(m).items():   # the replay drew the same init as PEFT alone
            assert torch.equal(value, get_peft_model_state_dict(ref)[key])
        randomise_b(ref, 100 + i)
        with torch.no_grad():
            for p, q in zip(m.params, [p for p in ref.parameters() if p.requires_grad]):
                p.copy_(q)
    starts = [0, 7, 20]
    examples = [encoded[s:s + n] for s, n in zip(starts, rows)]
    return base, slot, members, refs, examples, ids


def _label_loss(logits, labels, ids):
    return F.cross_entropy(logits[:, -2], torch.tensor(ids)[labels])


@pytest.mark.parametrize("rows", [(3, 5, 2), (4, 4, 4)])   # (4, 4, 4): the padded form is a plain reshape
def test_fused_forward_and_gradients_equal_separate_peft_models(tmp_path, rows):
    base, slot, members, refs, examples, ids = _group(tmp_path, rows)
    fused_batch = D.collate([e for ex in examples for e in ex], 0)
    slot.current = BatchLayout([len(ex) for ex in examples], fused_batch["attention_mask"], "cpu")
    logits = base(input_ids=fused_batch["input_ids"], attention_mask=fused_batch["attention_mask"]).logits
    start, total = 0, 0
    for ref, ex in zip(refs, examples):
        own = D.collate(ex, 0)
        ref_logits = ref(input_ids=own["input_ids"], attention_mask=own["attention_mask"]).logits
        mine = logits[start:start + len(ex), -own["input_ids"].shape[1]:]
        real = own["attention_mask"].bool()
        torch.testing.assert_close(mine[real], ref_logits[real], rtol=1e-6, atol=1e-6)
        _label_loss(ref_logits, own["labels"], ids).backward()
        total = total + _label_loss(mine, own["labels"], ids)
        start += len(ex)
    total.backward()
    for ref, m in zip(refs, members):
        theirs = [p for p in ref.parameters() if p.requires_grad]
        assert len(theirs) == len(m.params) > 0
        for p, q in zip(m.params, theirs):
            assert q.grad.abs().sum() > 0
            # relative to the tensor's norm (fp32; bmm and PEFT's matmuls sum in other orders, seen
            # up to 2e-6 after the backward through both layers)
            assert float((p.grad - q.grad).norm() / q.grad.norm()) < 1e-5


def test_padding_stays_exactly_zero_after_optimizer_steps(tmp_path):
    base, slot, members, _, examples, ids = _group(tmp_path)
    opts = [torch.optim.AdamW(m.params, lr=1e-2, weight_decay=0.1) for m in members]
    before = [[p.detach().clone() for p in m.params] for m in members]
    batch = D.collate([e for ex in examples for e in ex], 0)
    slot.current = BatchLayout([len(ex) for ex in examples], batch["attention_mask"], "cpu")
    for _ in range(3):
        logits = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        _label_loss(logits, batch["labels"], ids).backward()
        for m, opt in zip(members, opts):
            opt.step()
            M.zero_member_grads(m)
    layers = [mod for mod in base.modules() if isinstance(mod, StackedLoRALinear)]
    assert len(layers) == 2 * 4 + 1   # q k v o in both layers, up_proj in layer 1 only
    for layer in layers:
        for j, r in enumerate(layer.ranks):
            assert torch.count_nonzero(layer.lora_A[j, r:]) == 0
            assert torch.count_nonzero(layer.lora_Bt[j, r:]) == 0
        assert torch.count_nonzero(layer.lora_A.grad) == 0   # cleared in place, views linked
    for m, old in zip(members, before):
        assert all(not torch.equal(p, q) for p, q in zip(m.params, old))
        # dense blocks (B as a transposed view), so an optimizer's foreach kernels take their fast path
        assert all(p.is_contiguous() or p.t().is_contiguous() for p in m.params)
        assert all(p.grad.stride() == p.stride() for p in m.params)


def test_saved_member_adapter_loads_in_peft(tmp_path):
    from peft import PeftModel
    base, slot, members, refs, examples, _ = _group(tmp_path)
    path = M.save_adapter(members[1], tmp_path / "adapter")
    own = D.collate(examples[1], 0)
    slot.current = BatchLayout([0, len(examples[1]), 0], own["attention_mask"], "cpu")
    with torch.no_grad():
        fused = base(input_ids=own["input_ids"], attention_mask=own["attention_mask"]).logits
        plain = refs[1].get_base_model()
        loaded = PeftModel.from_pretrained(_unstacked(plain), str(path))
        theirs = loaded(input_ids=own["input_ids"], attention_mask=own["attention_mask"]).logits
    real = own["attention_mask"].bool()
    torch.testing.assert_close(fused[real], theirs[real], rtol=1e-6, atol=1e-6)
    saved = {k: v.clone() for k, v in M.state_dict(members[1]).items()}
    with torch.no_grad():
        for p in members[1].params:
            p.add_(1.0)
    M.load_adapter(members[1], path)
    assert all(torch.equal(v, saved[k]) for k, v in M.state_dict(members[1]).items())


def _unstacked(peft_base):
    """The reference model's own base with its LoRA layers removed (a fresh copy of the base)."""
    import copy
    model = copy.deepcopy(peft_base)
    from peft.tuners.lora import LoraLayer
    for name, mod in list(model.named_modules()):
        if isinstance(mod, LoraLayer):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, mod.get_base_layer())
    return model


def test_token_layout_slots():
    layout = TokenLayout([2, 0, 3, 1], "cpu")
    assert layout.jobs.tolist() == [0, 2, 3] and layout.width == 3 and layout.n_active == 3
    assert layout.slots.tolist() == [0, 1, 3, 4, 5, 6]
    same = TokenLayout([2, 2], "cpu")
    assert same.jobs is None and same.slots is None


def test_adapters_run_in_tf32_only_on_a_gpu_under_a_16_bit_base():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert adapters_in_tf32(torch.bfloat16, cuda) and adapters_in_tf32(torch.float16, cuda)
    assert not adapters_in_tf32(torch.float32, cuda) and not adapters_in_tf32(torch.bfloat16, cpu)


def _siblings(dtype):
    """Three stacked layers reading one input (q, k, v of an attention): a 16-bit base, float32
    adapters with random A and B, two jobs; and the layout slot they share."""
    from lat_core.train.fused.flat import FlatStacks
    torch.manual_seed(0)
    slot = LayoutSlot()
    stacks = FlatStacks([(4, 16), (4, 16)] * 3, 2, torch.float32, "cpu")
    with torch.no_grad():
        stacks.weights.normal_()
    views = stacks.views(stacks.weights)
    layers = [StackedLoRALinear(nn.Linear(16, 16).to(dtype), [4, 2], [2.0, 0.5], [0.0, 0.0], slot,
                                views[2 * k], views[2 * k + 1]) for k in range(3)]
    return slot, layers


def _through(slot, layers, x, shared: bool):
    """The siblings' outputs; shared=False hands each its own view of x (as each cast it)."""
    slot.current = BatchLayout.packed([5, 3], "cpu")
    return [layer(x if shared else x.view_as(x)) for layer in layers]


def test_siblings_share_one_cast_of_their_input_and_compute_the_same():
    """Under a bf16 base: one bf16 -> float32 copy of the input for the three adapters (was three),
    the same outputs and adapter gradients to the bit, the input's gradient within bf16 rounding."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Casts(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten._to_copy.default and args[0].dtype == torch.bfloat16:
                Casts.n += 1
            return func(*args, **kwargs)

    slot, layers = _siblings(torch.bfloat16)
    results = {}
    for shared in (False, True):
        x = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).requires_grad_()
        for layer in layers:
            layer.lora_A.grad = layer.lora_Bt.grad = None
        Casts.n = 0
        with Casts():
            out = _through(slot, layers, x, shared)
        casts = Casts.n
        out = torch.stack(out)
        out.float().sum().backward()
        results[shared] = (out.detach(), casts, x.grad, [(l.lora_A.grad, l.lora_Bt.grad) for l in layers])
    (out0, casts0, xg0, g0), (out1, casts1, xg1, g1) = results[False], results[True]
    assert (casts0, casts1) == (3, 1)
    assert torch.equal(out0, out1)
    assert all(torch.equal(a, b) for pair0, pair1 in zip(g0, g1) for a, b in zip(pair0, pair1))
    torch.testing.assert_close(xg1.float(), xg0.float(), rtol=2e-2, atol=2e-2)


def test_an_input_changed_in_place_is_cast_again():
    slot, layers = _siblings(torch.bfloat16)
    slot.current = BatchLayout.packed([5, 3], "cpu")
    x = torch.randn(1, 8, 16).to(torch.bfloat16)
    first = slot.adapter_input(x, torch.float32)
    assert slot.adapter_input(x, torch.float32) is first
    x.mul_(2)
    assert torch.equal(slot.adapter_input(x, torch.float32), first * 2)
    slot.current = BatchLayout.packed([5, 3], "cpu")   # a new batch: nothing kept from the last
    assert slot.adapter_input(x, torch.float32) is not first
