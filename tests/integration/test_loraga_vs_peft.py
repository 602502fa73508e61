"""LAT's LoRA-GA initialisation (lat_core/train/adapters.py) against the one PEFT ships
(peft.preprocess_loraga + init_lora_weights="lora_ga"), on the tiny CPU GLA model with the same
weights, the same batches and the same seed.  This pins why LAT keeps its own (see adapters.py):
the gradients agree, the initialisations do not."""
import copy

import pytest
import torch

from lat_core.train import adapters as A
from lat_core.train import data as D
from lat_core.train.evaluation import mean_loss_fn
from tests.integration.test_trainer_features import _batch, cfg_for

peft = pytest.importorskip("peft")
if not hasattr(peft, "LoraGAConfig"):
    pytest.skip("this PEFT has no LoRA-GA", allow_module_level=True)


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x.detach().float() - y.detach().float()).norm() / y.detach().float().norm())


def _both(tmp_path, direction="ArB2r"):
    """(LAT-initialised PeftModel, LAT's gradients, PEFT-initialised PeftModel, PEFT's gradients,
    the base weights before either, the batches' forward inputs)."""
    from lat_core.train.models import build_base_model, wrap_peft
    cfg = cfg_for(tmp_path, peft={"method": "loraga"})
    tok = D.build_tokenizer(D.load_dataset("tiny-sst2"))
    torch.manual_seed(0)
    base = build_base_model(cfg, tok)
    base_peft = copy.deepcopy(base)
    before = {n: p.detach().clone() for n, p in base.named_parameters()}
    batch, ids = _batch(tok)
    loss_fn = mean_loss_fn(ids, torch.device("cpu"))

    lat = wrap_peft(base, cfg, environ={})
    lat_grads = A.estimate_gradients(lat, [batch], loss_fn)
    A.apply_loraga(lat, lat_grads)

    config = A.lora_config(cfg, base_peft.config.num_hidden_layers, {})
    config.init_lora_weights = "lora_ga"
    config.lora_ga_config = peft.LoraGAConfig(direction=direction)   # scale "stable", gamma 16
    peft_grads = {}

    def train_step():
        loss_fn(base_peft, batch).backward()
    peft.preprocess_loraga(base_peft, config, train_step)
    for name, mod in base_peft.named_modules():
        if hasattr(mod, "_peft_loraga_grad"):
            peft_grads[name] = mod._peft_loraga_grad.detach().clone()
    torch.manual_seed(0)   # svd_lowrank draws from the global generator
    theirs = peft.get_peft_model(base_peft, config)
    return lat, lat_grads, theirs, peft_grads, before, batch


def test_same_gradients_different_initialisation(tmp_path):
    lat, lat_grads, theirs, peft_grads, before, batch = _both(tmp_path)
    assert sorted(lat_grads) == sorted(peft_grads) and len(lat_grads) == 8
    ours = dict(A.lora_layers(lat))
    peft_layers = dict(A.lora_layers(theirs))
    worst = {"grad": 0.0, "A": 0.0, "B": 0.0, "BA": 0.0, "dW": 0.0}
    least = {"A": 1e9, "B": 1e9}
    for name, g in lat_grads.items():
        worst["grad"] = max(worst["grad"], _rel(peft_grads[name], g))
        a, b = (ours[name].lora_A["default"].weight, ours[name].lora_B["default"].weight)
        pa, pb = (peft_layers[name].lora_A["default"].weight, peft_layers[name].lora_B["default"].weight)
        for key, mine, other in (("A", a, pa), ("B", b, pb), ("BA", b @ a, pb @ pa)):
            worst[key] = max(worst[key], _rel(other, mine))
            if key in least:
                least[key] = min(least[key], _rel(other, mine))
        w0 = before[name + ".weight"]
        dw_ours = w0 - ours[name].get_base_layer().weight
        dw_peft = w0 - peft_layers[name].get_base_layer().weight
        worst["dW"] = max(worst["dW"], _rel(dw_peft, dw_ours))
    print("LoRA-GA LAT vs PEFT, relative Frobenius differences (worst layer):", worst, "least:", least)
    assert worst["grad"] < 1e-5                      # the same gradient estimate ...
    assert least["A"] > 0.5 and least["B"] > 0.5    # ... but other singular vectors and scales
    assert worst["BA"] > 0.5 and worst["dW"] > 0.5
    # both keep the model's output at step 0 (W - s*B@A + s*B@A)
    with torch.no_grad():
        kw = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        torch.testing.assert_close(theirs(**kw).logits, lat(**kw).logits, rtol=1e-4, atol=1e-4)


def test_with_lats_direction_peft_differs_by_the_singular_values_and_the_scale_of_a(tmp_path):
    """PEFT's direction A2rBr takes LAT's singular vectors (A: right vectors r..2r, B: left 0..r);
    what remains is the scaling: LAT (as the LoRA-GA authors' code, scale "stable") multiplies A and
    B by c = out_dim**0.25 / sqrt(gamma); PEFT multiplies B by c * diag(S[:r]) and leaves A alone."""
    lat, lat_grads, theirs, _, _, _ = _both(tmp_path, direction="A2rBr")
    ours, peft_layers = dict(A.lora_layers(lat)), dict(A.lora_layers(theirs))
    worst, compared = {"A": 0.0, "B": 0.0}, []
    for name, g in lat_grads.items():
        r = ours[name].r["default"]
        c = g.shape[0] ** 0.25 / 16 ** 0.5
        all_s = torch.linalg.svdvals(g)
        if (all_s > all_s[0] * 1e-4).sum() <= 2 * r:
            continue   # rank < 2r (one small batch): singular vectors r..2r are arbitrary null-space ones
        compared.append(name)
        s = all_s[:r]
        a, b = ours[name].lora_A["default"].weight.detach(), ours[name].lora_B["default"].weight.detach()
        pa, pb = peft_layers[name].lora_A["default"].weight.detach(), peft_layers[name].lora_B["default"].weight.detach()
        # singular vectors are defined up to sign (A's rows pair with left vectors B does not hold)
        sign_a, sign_b = torch.sign((pa * a).sum(1)), torch.sign((pb * b).sum(0))
        worst["A"] = max(worst["A"], _rel(pa * sign_a[:, None], a / c))
        worst["B"] = max(worst["B"], _rel(pb * sign_b, b * s))
    print(f"LoRA-GA A2rBr: PEFT A vs LAT A / c, PEFT B vs LAT B * S (worst of {len(compared)} layers):", worst)
    assert len(compared) >= 4 and worst["A"] < 0.05 and worst["B"] < 0.05
