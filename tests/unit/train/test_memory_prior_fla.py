"""The memory prior's torch-free GLA parameter counts agree with fla's own model and PEFT's LoRA."""

import pytest

from lat_core.config.memory_prior import gla_shape, trainable_params
from lat_core.config.job import PeftConfig
from lat_core.config.peft_specs import expand_targets

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2, "vocab_size": 500}
GQA_TIED = {"hidden_size": 256, "num_hidden_layers": 3, "num_heads": 4, "num_kv_heads": 2, "vocab_size": 1000,
            "hidden_ratio": 2, "expand_k": 1, "tie_word_embeddings": True}
CONV_NO_GATE = {"hidden_size": 128, "num_hidden_layers": 1, "num_heads": 2, "vocab_size": 300,
                "intermediate_size": 200, "use_short_conv": True, "use_output_gate": False}
CASES = [(TINY, "QKVO"), (TINY, "G,GK,MLP"), (TINY, "q_proj,lm_head"), (GQA_TIED, "QKVO"),
         (GQA_TIED, "G,GK,MLP"), (GQA_TIED, "q_proj,lm_head"), (CONV_NO_GATE, "QKVO"), (CONV_NO_GATE, "GK,MLP")]


@pytest.mark.parametrize(("sizes", "targets"), CASES)
def test_counts_match_fla_and_peft(sizes, targets):
    torch = pytest.importorskip("torch")
    pytest.importorskip("fla")
    from fla.models import GLAConfig, GLAForCausalLM
    from peft import LoraConfig, get_peft_model

    modules = expand_targets(targets)
    with torch.device("meta"):
        model = GLAForCausalLM(GLAConfig(**sizes, fuse_cross_entropy=False))
    shape = gla_shape(sizes)
    assert shape.param_count() == sum(p.numel() for p in model.parameters())
    model = get_peft_model(model, LoraConfig(r=4, target_modules=modules))
    lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable_params(shape, PeftConfig(r=4, target_modules=modules)) == lora
