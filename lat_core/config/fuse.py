"""Which jobs may train together in one fused process (lat_core/train/fused), decided from their
typed configs alone, so the engine (which never imports the trainer) and the fused trainer's own
refusals use the same rules.

Why each part of the key: a group shares one frozen base (family, checkpoint, dtype; for a
tiny-random base also its sizes and the seed it is built with), one tokenizer (built from the data
when the base ships none, so the data is part of the key: conservative for bases that ship one) and
one optimisation path (plain LoRA/rsLoRA, no gradient checkpointing, classification only).
"""
from __future__ import annotations

from lat_core.config.datasets import canonical
from lat_core.config.job import TINY, JobConfig

FUSABLE_METHODS = ("lora", "rslora")
FUSABLE_INITS = (True, "gaussian")  # PiSSA, LoRA-GA, ... rewrite the base weights
GENERATION_DATASETS = ("samsum", "dart", "spider")


def base_key(cfg: JobConfig) -> tuple[object, ...]:
    """What decides the base weights: family, checkpoint, dtype; for tiny-random also sizes and seed."""
    m = cfg.model
    tiny = (tuple(sorted(m.tiny.items())), cfg.seed) if m.name_or_path == TINY else None
    return (m.family, m.name_or_path, m.dtype, tiny, cfg.gla.use_fused_swiglu)


def adapter_refusal(cfg: JobConfig) -> str | None:
    """Why the job's adapter cannot share a frozen base with others, or None."""
    p = cfg.peft
    if p.method not in FUSABLE_METHODS or p.use_dora or p.init_lora_weights not in FUSABLE_INITS:
        return (f"fuse: {cfg.name} uses peft.method {p.method} (use_dora {p.use_dora}, init "
                f"{p.init_lora_weights}); only plain LoRA jobs fuse")
    if cfg.train.gradient_checkpointing:
        return f"fuse: {cfg.name} sets train.gradient_checkpointing; fused groups run without it"
    return None


def own_pieces_refusal(cfg: JobConfig) -> str | None:
    """Why what the user brings (lat_core.config.user_data, train_args) keeps the job out of a fused
    group, or None: a group runs one step loop, one evaluation and one set of callbacks for all its
    members, none of which takes a member's own TrainingArguments, callbacks, early stopping or
    column-named data (its metric and label space), so such a job trains alone rather than lose them."""
    t = cfg.train
    own = [what for what, given in (("data as columns (data: {path: ...})", not isinstance(cfg.data, str)),
                                    (f"train.args ({', '.join(t.args)})", bool(t.args)),
                                    ("train.callbacks", bool(t.callbacks)),
                                    ("train.early_stopping", t.stopping is not None)) if given]
    if not own:
        return None
    return f"fuse: {cfg.name} brings its own {' and '.join(own)}, which a fused group does not run per member; it trains alone"


def refusal(cfg: JobConfig) -> str | None:
    """Why the engine must not put this job in a fused group, or None. Stricter than the trainer's
    own checks: a dataset whose kind is not known here (a local directory) is not risked."""
    why = adapter_refusal(cfg) or own_pieces_refusal(cfg)
    if why:
        return why
    assert isinstance(cfg.data, str)   # own_pieces_refusal: data given as columns trains alone
    data = canonical(cfg.data)
    if data in GENERATION_DATASETS:
        return f"fuse: {cfg.name} trains on {cfg.data}, a generation task; only classification jobs fuse"
    if "/" in cfg.data or cfg.data.startswith("."):
        return f"fuse: {cfg.name} trains on a local dataset directory whose task kind is unknown here"
    return None


def fuse_key(cfg: JobConfig) -> tuple[object, ...] | None:
    """Jobs with equal keys can train in one fused group; None: this job trains alone."""
    if refusal(cfg) is not None:
        return None
    return (base_key(cfg), cfg.data, cfg.data_dir)
