"""Bucketed (static, for graphs) and packed (varlen) micro-batches score the same tokens with the
same losses as the padded eager batch: tiny GLA in fp32 on the CPU, per example.  Which modes a job
gets, and why not, without a GPU."""
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from lat_core.config.job import parse_config
from lat_core.train import data as D

ROOT = Path(__file__).resolve().parents[3]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"
MAMBA = ROOT / "configs/experiments/mamba/tiny_lora.yaml"
pytest.importorskip("fla")


def _cfg(tmp_path, src=GLA, **sections):
    raw = yaml.safe_load(src.read_text())
    for key, values in sections.items():
        raw.setdefault(key, {}).update(values)
    raw["output_dir"] = str(tmp_path)
    return parse_config(raw, environ={})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from lat_core.train.models import build_base_model, wrap_peft
    cfg = _cfg(tmp_path_factory.mktemp("m"))
    tok = D.build_tokenizer(D.load_dataset("tiny-sst2"))
    model = wrap_peft(build_base_model(cfg, tok), cfg, environ={})
    for name, p in model.named_parameters():   # LoRA B starts at zero: make the adapter matter
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5, generator=torch.Generator().manual_seed(len(name)))
    return tok, model.eval()


def _cls_examples(tok, n=5):
    ids = D.label_token_ids(tok, ("negative", "positive"))
    return D.encode(D.load_dataset("tiny-sst2").train[:n], tok, ids, 48), ids


def _gen_examples(tok):
    rows = [{"prompt": "sentence: a good film", "target": "good fun", "refs": []},
            {"prompt": "sentence: bad", "target": "not good at all", "refs": []},
            {"prompt": "sentence: a fine and moving film , well made", "target": "fine", "refs": []}]
    return D.encode_gen(rows, tok, 48, 8)


def _eager_cls_rows(model, examples, tok, label_ids):
    """The eager trainer's padded batch: per-example label losses."""
    from lat_core.train.evaluation import label_logits
    batch = D.collate(examples, tok.pad_token_id)
    target = torch.tensor(label_ids)[batch["labels"]]
    return F.cross_entropy(label_logits(model, batch), target, reduction="none")


def _one_scored(batch, row, key="targets"):
    """The batch with every target but row `row`'s blanked: its loss is that example's."""
    out = dict(batch)
    out[key] = batch[key].clone()
    keep = torch.zeros_like(out[key], dtype=torch.bool)
    keep[row] = True
    out[key] = out[key].masked_fill(~keep, -100)
    return out


def test_bucket_widths():
    assert D.bucket_widths(48) == [16, 32, 48]
    assert D.bucket_widths(256) == [16, 32, 64, 128, 256]
    assert D.bucket_widths(8) == [8]


def test_bucketed_rows_keep_each_label_loss(tiny):
    from lat_core.train.graphs import PadKeyMask, masked_static_loss
    tok, model = tiny
    examples, label_ids = _cls_examples(tok)
    ref = _eager_cls_rows(model, examples, tok, label_ids)
    longest = max(len(e["input_ids"]) for e in examples)
    # wider than the batch needs (a bucket) and with two all-pad rows (a short micro-batch)
    batch = D.static_batch(examples, tok.pad_token_id, rows=len(examples) + 2, width=longest + 9, keep=2)
    assert batch["n_scored"] == len(examples) and batch["input_ids"].shape == (len(examples) + 2, longest + 9)
    mask = PadKeyMask(model)
    try:
        with torch.no_grad():
            got = [masked_static_loss(model, mask, _one_scored(batch, i)).item() for i in range(len(examples))]
            total = masked_static_loss(model, mask, batch).item()
    finally:
        mask.remove()
    assert got == pytest.approx(ref.tolist(), rel=1e-5, abs=1e-6)
    assert total == pytest.approx(ref.sum().item(), rel=1e-5)


def test_without_the_pad_mask_padding_leaks_into_the_state(tiny):
    """The check that the mask matters: the same bucketed batch without it scores differently."""
    from lat_core.train.evaluation import static_loss
    tok, model = tiny
    examples, label_ids = _cls_examples(tok)
    ref = _eager_cls_rows(model, examples, tok, label_ids).sum().item()
    batch = D.static_batch(examples, tok.pad_token_id, rows=len(examples), width=48, keep=2)
    with torch.no_grad():
        assert static_loss(model, batch).item() != pytest.approx(ref, rel=1e-3)


def test_packed_examples_keep_each_label_loss(tiny):
    from lat_core.train.evaluation import packed_loss
    tok, model = tiny
    examples, label_ids = _cls_examples(tok)
    ref = _eager_cls_rows(model, examples, tok, label_ids)
    batch = D.packed_batch(examples)
    assert batch["input_ids"].shape == (1, sum(len(e["input_ids"]) for e in examples))
    assert batch["targets"][0].tolist() == [label_ids[e["label"]] for e in examples]
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], cu_seqlens=batch["cu_seqlens"], logits_to_keep=batch["keep"])
        got = F.cross_entropy(out.logits[0].float(), batch["targets"][0], reduction="none")
        total = packed_loss(model, batch).item()
    assert got.tolist() == pytest.approx(ref.tolist(), rel=1e-5, abs=1e-6)
    assert total == pytest.approx(ref.sum().item(), rel=1e-5)


def test_packed_bounds_have_the_dtype_of_flas_own_unpadding(tiny):
    """Triton's autotuner keys a kernel by its arguments' dtypes: packed rows must reach fla's varlen
    kernels with the cu_seqlens dtype its unpadding of a masked batch (what the kernel warm-up runs)
    uses, or every packed job autotunes them again."""
    from fla.ops.utils.index import prepare_cu_seqlens_from_mask
    tok, _ = tiny
    examples, _ = _cls_examples(tok)
    batch = D.packed_batch(examples)
    lengths = [len(e["input_ids"]) for e in examples]
    mask = torch.tensor([[0] * (max(lengths) - n) + [1] * n for n in lengths], dtype=torch.bool)
    from_mask = prepare_cu_seqlens_from_mask(mask)
    assert batch["cu_seqlens"].dtype == from_mask.dtype
    assert batch["cu_seqlens"].tolist() == from_mask.tolist()


def test_generation_targets_same_loss_in_every_layout(tiny):
    from lat_core.train.evaluation import batch_loss, packed_loss
    from lat_core.train.graphs import PadKeyMask, masked_static_loss
    tok, model = tiny
    examples = _gen_examples(tok)
    eager = D.TrainCollate(tok.pad_token_id)(examples)
    static = D.TrainCollate(tok.pad_token_id, D.Layout("static", rows=4, widths=(16, 32), keep_gen=10))(examples)
    packed = D.TrainCollate(tok.pad_token_id, D.Layout("packed"))(examples)
    assert eager["n_scored"] == static["n_scored"] == packed["n_scored"]
    mask = PadKeyMask(model)
    with torch.no_grad():
        ref, _ = batch_loss(model, eager, [])
        got_static = masked_static_loss(model, mask, static).item()
        got_packed = packed_loss(model, packed).item()
    mask.remove()
    assert got_static == pytest.approx(ref.item(), rel=1e-5)
    assert got_packed == pytest.approx(ref.item(), rel=1e-5)


def test_modes_and_why_not(tmp_path):
    from lat_core.train.graphs import resolve_modes
    cpu, gpu = torch.device("cpu"), torch.device("cuda")

    def auto(**sections):   # graphs: auto (the default), said outright
        return _cfg(tmp_path, **{**sections, "train": {"graphs": "auto", **sections.get("train", {})}})

    default = resolve_modes(_cfg(tmp_path), gpu, 1)
    assert default.graphs and default.graphs_why.startswith("static widths")   # the default on a GPU
    modes = resolve_modes(auto(), cpu, 1)
    assert not modes.graphs and "GPU" in modes.graphs_why and modes.pack
    assert resolve_modes(auto(), gpu, 1).graphs   # decided without touching a GPU
    assert not resolve_modes(auto(), gpu, 1).pack
    cases = [({"train": {"graphs": False}}, "train.graphs: false"),
             ({"train": {"gradient_checkpointing": True}}, "checkpointing"),
             ({"peft": {"dropout": 0.1}}, "dropout"),
             ({"peft": {"method": "dora"}}, "DoRA")]
    for sections, why in cases:
        modes = resolve_modes(auto(**sections), gpu, 1)
        assert not modes.graphs and why in modes.graphs_why, (sections, modes)
        assert not modes.pack and "measured slower" in modes.pack_why
        assert resolve_modes(auto(train={**sections.get("train", {}), "pack": True},
                                  **{k: v for k, v in sections.items() if k != "train"}), gpu, 1).pack
    assert not resolve_modes(auto(train={"pack": True}), gpu, 1).pack   # graphs win
    assert "torchrun" in resolve_modes(auto(), gpu, 2).graphs_why
    mamba = resolve_modes(auto(src=MAMBA), gpu, 1)
    assert not mamba.graphs and "GLA" in mamba.graphs_why and not mamba.pack
    assert not resolve_modes(_cfg(tmp_path, train={"pack": False}), cpu, 1).pack
