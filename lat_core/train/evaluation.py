"""Evaluation: label-position loss and accuracy, generation metrics, saved predictions."""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from . import data as D


def set_logits_to_keep(model, setting, source: str = "train.logits_to_keep") -> str:
    """Remember on the model how many final positions the LM head should compute.

    "auto": only what the loss needs (2 for classification, the longest target + 1 for
    generation) when the model's forward accepts `logits_to_keep`; 0: all positions; N: the
    last N.  Returns a line for the log.
    """
    import inspect
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    supported = "logits_to_keep" in inspect.signature(base.forward).parameters
    model._lat_ltk = (setting if supported else 0, source, setting)
    if not supported and setting != 0:
        return f"logits_to_keep: {type(base).__name__}.forward has no logits_to_keep; computing all logits"
    if setting == "auto":
        return "logits_to_keep: auto (only the positions the loss needs)"
    return f"logits_to_keep: {setting} ({source}; at least the positions the loss needs)" if setting else \
        "logits_to_keep: 0 (all positions)"


def _forward(model, batch, need: int) -> tuple[torch.Tensor, int]:
    """(logits of the last k positions, k) with k >= need; k = width when all are computed."""
    setting, source, _ = getattr(model, "_lat_ltk", (0, "", 0))
    width = batch["input_ids"].shape[1]
    # The seeds' LOGITS_TO_KEEP=1 (set on every GLUE command) means "as few as the loss allows";
    # label-position loss needs two, so a smaller N computes what the loss needs instead of failing.
    keep = need if setting == "auto" else (max(setting, need) if setting else 0)
    kwargs = {"logits_to_keep": keep} if keep and keep < width else {}
    # No cache: scoring never decodes on. With one (the configs' use_cache default, in eval mode) fla
    # stores each layer's final state, a kernel variant of its own that the kernel warm-up, which runs
    # without a cache as training does, never compiles: 47 s of compiling at a fused group's first
    # evaluation of 256-token rows on an H100 (bench/RESULTS.md, 2026-11-26, tenth session).
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False, **kwargs)
    return out.logits, out.logits.shape[1]


def label_logits(model, batch) -> torch.Tensor:
    """Logits at the position that predicts the label token (the second to last)."""
    logits, _ = _forward(model, batch, 2)
    return logits[:, -2, :].float()


def batch_loss(model, batch, label_ids, smoothing: float = 0.0) -> tuple[torch.Tensor, int]:
    """(summed loss, number of scored tokens): label token for classification, target tokens else.
    ``smoothing``: label smoothing over the vocabulary (train.args.label_smoothing_factor)."""
    if "labels" in batch:
        # label_ids: a list, or (training) a tensor already on the device, to skip a copy per batch
        target = torch.as_tensor(label_ids, device=batch["input_ids"].device)[batch["labels"]]
        return F.cross_entropy(label_logits(model, batch), target, reduction="sum",
                               label_smoothing=smoothing), len(target)
    # n_need comes from the training collate (a host-side int): no device sync per micro-batch
    need = batch["n_need"] if "n_need" in batch else int(batch["target_mask"].sum(1).max()) + 1
    logits, k = _forward(model, batch, need)
    logits = logits[:, :-1].float()
    tgt = batch["input_ids"][:, -k + 1:]
    mask = batch["target_mask"][:, -k + 1:].bool()
    n = batch["n_scored"] if "n_scored" in batch else int(mask.sum())
    # ignore_index instead of boolean indexing: indexing by a mask waits for the GPU
    tgt = tgt.masked_fill(~mask, -100)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100,
                           reduction="sum", label_smoothing=smoothing), n


def static_loss(model, batch) -> torch.Tensor:
    """Summed loss of a static-layout micro-batch (data.static_batch): the logits of the positions
    before `targets`, cross entropy where a target is set.  No attention_mask reaches the model:
    graphs.PadKeyMask keeps the left padding out of the recurrent state instead, so that nothing in
    the step waits for the host (fla's unpadding does) and the step can be captured as a graph."""
    targets = batch["targets"]
    logits = model(input_ids=batch["input_ids"], logits_to_keep=targets.shape[1] + 1).logits[:, :-1]
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=-100, reduction="sum")


def packed_loss(model, batch, smoothing: float = 0.0) -> torch.Tensor:
    """Summed loss of a packed micro-batch (data.packed_batch): one row, fla's varlen path
    (`cu_seqlens`), logits only at the positions in `keep`."""
    out = model(input_ids=batch["input_ids"], cu_seqlens=batch["cu_seqlens"], logits_to_keep=batch["keep"])
    return F.cross_entropy(out.logits[0].float(), batch["targets"][0], reduction="sum", label_smoothing=smoothing)


def mean_loss_fn(label_ids, device):
    """loss(model, examples) -> mean loss; used by LoRA-GA and the SDLoRA warm-up."""
    def fn(model, batch):
        s, n = batch_loss(model, {k: v.to(device) for k, v in batch.items()}, label_ids)
        return s / max(1, n)
    return fn


def cls_eval_copies(model, examples, ds, label_ids, pad_id, batch_size, device, accum: int = 0,
                    copies: int = 1) -> list[tuple[list, list, float]]:
    """Predictions, STS-B scores and mean loss, one triple per copy: the model's forward answers each
    batch ``copies`` times, in blocks of the batch's rows (1 for a job alone; a fused group's members
    evaluated in one pass: fused.evaluation), each copy computed as a single model's would be.
    Results stay on the device for `accum` batches (EVAL_ACCUMULATION_STEPS; 0: moved to the host
    after every batch)."""
    out = [([], [], 0.0) for _ in range(copies)]
    pending: list[list[tuple]] = [[] for _ in range(copies)]

    def flush():
        for c, waiting in enumerate(pending):
            if waiting:
                preds, scores, loss_sum = out[c]
                preds.extend(torch.cat([p for p, _, _ in waiting]).tolist())
                if ds.task == "stsb":
                    scores.extend(torch.cat([s for _, s, _ in waiting]).tolist())
                out[c] = (preds, scores, loss_sum + float(torch.stack([lo for _, _, lo in waiting]).sum().item()))
                waiting.clear()

    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            batch = {k: v.to(device) for k, v in D.collate(examples[i:i + batch_size], pad_id).items()}
            every = label_logits(model, batch)
            target = torch.tensor(label_ids, device=device)[batch["labels"]]
            rows = len(target)
            for c in range(copies):
                logits = every[c * rows:(c + 1) * rows]
                loss = F.cross_entropy(logits, target, reduction="sum")
                sub = logits[:, label_ids]
                score = None
                if ds.task == "stsb":
                    score = (sub.softmax(-1) * torch.arange(len(label_ids), device=device)).sum(-1)
                pending[c].append((sub.argmax(-1), score, loss))
            if len(pending[0]) >= max(1, accum):
                flush()
        flush()
    return [(preds, scores, loss_sum / len(examples)) for preds, scores, loss_sum in out]


def evaluate_split(model, tokenizer, examples, ds, cfg, label_ids, split, extra=None) -> tuple[dict, list]:
    """Metrics (names as lat_core/results expects) and per-example predictions for one split."""
    from . import metrics as M
    if ds.kind == "cls":
        return evaluate_cls_copies(model, tokenizer, examples, ds, cfg, label_ids, extra)[0]
    model.eval()
    try:
        from .generate import generate
        bs = cfg.eval.batch_size or cfg.train.batch_size
        texts = generate(model, tokenizer, [e["prompt_ids"] for e in examples], cfg, bs)
        rows_in = [e["row"] for e in examples]
        if ds.task == "samsum":
            metrics = M.rouge(texts, [r["target"] for r in rows_in])
        elif ds.task == "dart":
            metrics = M.dart(texts, [r["refs"] for r in rows_in])
        elif ds.task == "spider":
            metrics = M.spider(texts, [r["target"] for r in rows_in], [r["db_id"] for r in rows_in],
                               ds.info["db_root"])
        else:   # a user's generation data (own_data): ROUGE, and BLEU when data.metric asks for it
            metrics = M.rouge(texts, [r["target"] for r in rows_in])
            if ds.metric == "bleu":
                metrics.update(M.bleu(texts, [r["refs"] for r in rows_in]))
        rows = [{"pred": t, "refs": r["refs"], **({"db_id": r["db_id"]} if "db_id" in r else {})}
                for t, r in zip(texts, rows_in)]
        return metrics, rows
    finally:
        model.train()


def evaluate_cls_copies(model, tokenizer, examples, ds, cfg, label_ids, extra=None,
                        copies: int = 1) -> list[tuple[dict, list]]:
    """A classification split's (metrics, predictions) for each of ``copies`` (cls_eval_copies)."""
    from . import metrics as M
    device = next(model.parameters()).device
    bs = cfg.eval.batch_size or cfg.train.batch_size
    pad_id = tokenizer.pad_token_id
    model.eval()
    try:
        per_copy = cls_eval_copies(model, examples, ds, label_ids, pad_id, bs, device,
                                   cfg.train.eval_accumulation_steps, copies)
        mm = cls_eval_copies(model, extra, ds, label_ids, pad_id, bs, device, copies=copies) if extra else None
    finally:
        model.train()
    golds = [e["label"] for e in examples]
    out = []
    for c, (preds, scores, loss) in enumerate(per_copy):
        if ds.task == "stsb":
            gold_scores = [e["score"] for e in examples]
            metrics = {**M.regression(scores, gold_scores), "loss": loss}
            rows = [{"pred": p, "gold": g} for p, g in zip(scores, gold_scores)]
        else:
            metrics = {**M.classification(ds.task, preds, golds, ds.metric, len(ds.label_words)), "loss": loss}
            rows = [{"pred": p, "gold": g} for p, g in zip(preds, golds)]
        if mm:  # MNLI mismatched
            metrics["accuracy_mm"] = M.classification(ds.task, mm[c][0], [e["label"] for e in extra])["accuracy"]
        out.append((metrics, rows))
    return out


def write_predictions(out: Path, step: int, split: str, rows: list[dict]) -> Path:
    """predictions/step-N-<split>.jsonl, one prediction per example."""
    path = out / "predictions" / f"step-{step}-{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
