"""The evaluation's scoring forward asks fla for no final state: a cache would make fla's GLA kernels
store each layer's state, a compiled variant the kernel warm-up never builds (it runs cache-free, as
training does), so the first evaluation of a fresh machine compiled for most of a minute."""
import torch

from lat_core.train.evaluation import label_logits
from lat_core.train.fla_gla import gla_classes


def test_scoring_forward_of_a_gla_model_in_eval_mode_stores_no_final_state(monkeypatch):
    from lat_core.train.gla_cpu import disable_cpu_gla, enable_cpu_gla, is_enabled
    import fla.layers.gla as layer

    GLAConfig, GLAForCausalLM = gla_classes()
    was_enabled = is_enabled()
    enable_cpu_gla(force=True)
    asked = []
    for name in ("chunk_gla", "fused_recurrent_gla"):   # the layer's two kernels: long and short rows
        real = getattr(layer, name)
        monkeypatch.setattr(layer, name, lambda real=real, name=name, **kw: asked.append(
            (name, kw["output_final_state"])) or real(**kw))
    try:
        torch.manual_seed(0)
        model = GLAForCausalLM(GLAConfig(hidden_size=32, num_hidden_layers=2, num_heads=2, vocab_size=50))
        assert model.config.use_cache   # the default a saved config carries
        model.eval()
        for width in (16, 80):
            ids = torch.randint(1, 50, (3, width))
            mask = torch.ones_like(ids)
            mask[0, : width // 2] = 0   # a left-padded row, as the evaluation collates
            with torch.no_grad():
                logits = label_logits(model, {"input_ids": ids, "attention_mask": mask})
            assert logits.shape == (3, 50) and torch.isfinite(logits).all()
        assert {name for name, _ in asked} == {"chunk_gla", "fused_recurrent_gla"}
        assert not any(final for _, final in asked)
    finally:
        if not was_enabled:
            disable_cpu_gla()
