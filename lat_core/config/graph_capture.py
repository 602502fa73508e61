"""Whether a job's training step can be captured in CUDA graphs, from its config alone (torch-free:
the trainer decides with it on a GPU, lat_core.train.graphs, and the kernel warm-up's shapes use it
to know which jobs will train eagerly on rows fla unpads, lat_core.config.kernel_shapes)."""
from __future__ import annotations

from lat_core.config.job import JobConfig

GRAPH_PEFT_METHODS = ("lora", "rslora", "pissa", "loraga")


def capture_blocker(cfg: JobConfig) -> str | None:
    """Why this job's step cannot be captured, whatever the device, or None when it can."""
    t, p = cfg.train, cfg.peft
    if cfg.model.family != "gla":
        return (f"{cfg.model.family}: graphs are implemented for GLA (the padding mask of "
                f"{cfg.model.family} is not made static here)")
    if t.gradient_checkpointing:
        return "gradient checkpointing recomputes the forward inside the backward; not captured"
    if p.method not in GRAPH_PEFT_METHODS or p.use_dora:
        return f"peft {p.method}{' + DoRA' if p.use_dora else ''} is not verified under capture"
    if p.dropout > 0:
        return (f"LoRA dropout {p.dropout:g} draws random numbers; a graph's random stream differs from "
                "the eager one a resumed run repeats")
    if t.args:
        return (f"train.args ({', '.join(t.args)}) may change the step (label smoothing, NEFTune noise, ...); "
                "the captured step is verified only without them")
    return None


def trains_eagerly_on_a_gpu(cfg: JobConfig) -> bool:
    """The job's steps on one GPU are not graphed (train.graphs: false, or a capture blocker)."""
    return cfg.train.graphs is False or capture_blocker(cfg) is not None
