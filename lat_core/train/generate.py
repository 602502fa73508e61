"""Generation for evaluation through HF `.generate()`, batched with left padding.

Lengths: with GLA_USE_MAX_NEW_TOKENS on (default) EVAL_GEN_MAX_LENGTH / EVAL_GEN_MIN_LENGTH count
new tokens (max_new_tokens / min_new_tokens); with it off they are total lengths (max_length /
min_length, prompt included).  Greedy unless EVAL_GEN_NUM_BEAMS > 1.
"""
from __future__ import annotations

import torch

from . import data as D


def gen_kwargs(cfg, tokenizer) -> dict:
    e = cfg.eval
    # use_cache explicit: the HF Trainer sets model.config.use_cache = False for training, and
    # without the recurrent state every new token would recompute the whole prefix
    kw = {"num_beams": e.num_beams, "do_sample": False, "pad_token_id": tokenizer.pad_token_id,
          "eos_token_id": tokenizer.eos_token_id, "use_cache": True}
    if e.use_max_new_tokens:
        kw.update(max_new_tokens=e.gen_max_length, min_new_tokens=e.gen_min_length)
    else:
        kw.update(max_length=e.gen_max_length, min_length=e.gen_min_length)
    return kw


def generate_ids(model, prompts: list[list[int]], pad_id: int, kwargs: dict, batch_size: int) -> list[list[int]]:
    """New token ids for each prompt (prompt and padding stripped, cut after the first eos)."""
    device = next(model.parameters()).device
    eos = kwargs.get("eos_token_id")
    out = []
    for i in range(0, len(prompts), batch_size):
        chunk = [{"input_ids": p} for p in prompts[i:i + batch_size]]
        batch = D.collate(chunk, pad_id)
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        with torch.no_grad():
            gen = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        for row in gen[:, ids.shape[1]:].tolist():
            if eos is not None and eos in row:
                row = row[:row.index(eos)]
            out.append(row)
    return out


def generate(model, tokenizer, prompts: list[list[int]], cfg, batch_size: int) -> list[str]:
    """Decoded generations; one prompt at a time when left padding is not in force."""
    if tokenizer.padding_side != "left":
        batch_size = 1
    ids = generate_ids(model, prompts, tokenizer.pad_token_id, gen_kwargs(cfg, tokenizer), batch_size)
    return [tokenizer.decode(r, skip_special_tokens=True).strip() for r in ids]
