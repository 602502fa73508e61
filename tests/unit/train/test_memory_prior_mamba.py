"""The memory prior's torch-free Mamba parameter counts agree with transformers' model and PEFT's LoRA."""

import pytest

from lat_core.config.job import PeftConfig
from lat_core.config.mamba_memory import mamba_shape
from lat_core.config.memory_prior import trainable_params

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "state_size": 8, "vocab_size": 500, "tie_word_embeddings": False}
TIED_BIAS = {"hidden_size": 96, "num_hidden_layers": 3, "state_size": 16, "vocab_size": 700, "expand": 3,
             "time_step_rank": 5, "conv_kernel": 3, "use_bias": True, "use_conv_bias": False}
CASES = [(TINY, ["in_proj", "x_proj"]), (TINY, ["dt_proj"]), (TIED_BIAS, ["in_proj", "x_proj"]),
         (TIED_BIAS, ["in_proj", "x_proj", "dt_proj"])]


@pytest.mark.parametrize(("sizes", "targets"), CASES)
def test_counts_match_transformers_and_peft(sizes, targets):
    torch = pytest.importorskip("torch")
    from peft import LoraConfig, get_peft_model
    from transformers import MambaConfig, MambaForCausalLM

    with torch.device("meta"):
        model = MambaForCausalLM(MambaConfig(**sizes))
    shape = mamba_shape(sizes)
    assert shape.param_count() == sum(p.numel() for p in model.parameters())
    model = get_peft_model(model, LoraConfig(r=4, target_modules=targets))
    lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable_params(shape, PeftConfig(r=4, target_modules=targets)) == lora
