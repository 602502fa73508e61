"""The training loop: steps, evaluation, checkpoints, resume, and the event stream.

Why label-position loss: the task is "sentence: ... label: <word>"; training
on the label token only (cross entropy over the full vocabulary at the position
before it) learns the task fastest, and accuracy compares the logits of the two
label words at that same position.
"""
from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from . import data as D
from .config import JobConfig, TrainConfigError
from .events import EventWriter
from .checkpoints import checkpoints, load_checkpoint, save_checkpoint
from .evaluation import (  # noqa: F401 (batch_loss, mean_loss_fn are used by tests through loop)
    batch_loss, evaluate_split, mean_loss_fn, set_logits_to_keep, write_predictions,
)


def log(msg: str) -> None:
    """Human log line (the engine redirects stdout into train.log)."""
    print(msg, flush=True)


MAIN_METRIC = {"cola": "mcc", "mrpc": "f1", "qqp": "f1", "stsb": "pearson", "samsum": "rougeL",
               "dart": "bleu", "spider": "exec_accuracy"}


def peak_memory() -> dict:
    """Peak RSS of this process (ru_maxrss is KiB on Linux) and peak CUDA allocation."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gpu = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    return {"peak_rss_bytes": rss, "peak_gpu_bytes": gpu}


def lr_schedule(cfg: JobConfig, max_steps: int) -> tuple:
    """(lr_of_step, description, name, warmup_steps); lr_of_step(s) is the rate of step s (1-based).

    Shapes come from transformers.get_scheduler (HF convention: step s uses the multiplier of
    s - 1, so warm-up starts at 0).  Evaluated per step rather than stepped, so a resumed run
    uses exactly the rates of an uninterrupted one.  Default: constant_with_warmup when a
    warm-up is set, else constant.  warmup_steps > 0 wins over warmup_ratio.
    """
    from transformers import get_scheduler
    t = cfg.train
    warm = t.warmup_steps or math.ceil(t.warmup_ratio * max_steps)
    name = t.lr_scheduler or ("constant_with_warmup" if warm else "constant")
    dummy = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=t.lr)
    sched = get_scheduler(name, dummy, num_warmup_steps=warm, num_training_steps=max_steps)
    fn = sched.lr_lambdas[0]
    note = " (warm-up ignored by the constant schedule)" if name == "constant" and warm else ""
    return (lambda step: t.lr * fn(step - 1)), f"{name}, warmup {warm} steps{note}", name, warm


def lr_at(step: int, cfg: JobConfig) -> float:
    """Learning rate of step `step` (kept for callers; builds the schedule each call)."""
    return lr_schedule(cfg, cfg.train.max_steps)[0](step)


def check_dtype(cfg: JobConfig, device: torch.device) -> None:
    """Fail early, naming HP_PREC / model.dtype, when torch cannot train in the dtype here."""
    from .models import DTYPES
    dtype = DTYPES[cfg.model.dtype]
    if dtype == torch.float32:
        return
    try:
        w = torch.randn(8, 8, device=device, dtype=dtype, requires_grad=True)
        x = torch.randn(4, 8, device=device, dtype=dtype)
        (F.silu(x @ w).float().logsumexp(-1).sum()).backward()
    except (RuntimeError, TypeError) as exc:
        where = cfg.sources.get("model.dtype", "model.dtype")
        where = f"{where[4:]}" if where.startswith("env:") else "model.dtype"
        raise TrainConfigError(f"{where}: {cfg.model.dtype} is not supported on {device.type} by "
                               f"torch {torch.__version__} ({exc}); use fp32 here") from None


def write_env(out: Path, argv: list[str] | None) -> dict:
    """env.json: package versions and the exact command of this invocation."""
    import platform
    import shlex
    from importlib import metadata
    versions = {}
    for pkg in ("torch", "transformers", "peft", "flash-linear-attention", "fla-core", "tokenizers",
                "safetensors", "scikit-learn", "scipy", "rouge-score", "sacrebleu", "datasets"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    argv = list(sys.argv[1:] if argv is None else argv)
    record = {"python": platform.python_version(), "platform": platform.platform(),
              "executable": sys.executable, "packages": versions,
              "argv": [sys.executable, "-m", "lat_core.train", *argv],
              "command": shlex.join([sys.executable, "-m", "lat_core.train", *argv]),
              "cwd": os.getcwd(), "cuda": torch.version.cuda}
    (out / "env.json").write_text(json.dumps(record, indent=1))
    return record


def micro_batches(idx: list[int], size: int) -> list[list[int]]:
    return [idx[i:i + size] for i in range(0, len(idx), size)]


def _setup_batches(train_ex, cfg, n_batches: int, seed_offset: int, pad_id):
    """A few effective batches for LoRA-GA / SDLoRA warm-up, from their own seeded order."""
    tr = cfg.train
    eff = tr.batch_size * tr.grad_accum
    out = []
    for idx in D.train_batches(len(train_ex), eff, cfg.seed + seed_offset, 0, n_batches):
        for mb in micro_batches(idx, tr.batch_size):
            out.append(D.collate([train_ex[i] for i in mb], pad_id))
    return out


def _encode_all(ds, tokenizer, cfg):
    tr = cfg.train
    if ds.kind == "cls":
        label_ids = D.label_token_ids(tokenizer, ds.label_words)
        enc = lambda rows: D.encode(rows, tokenizer, label_ids, tr.max_seq_len)  # noqa: E731
    else:
        label_ids = []
        enc = lambda rows: D.encode_gen(rows, tokenizer, tr.max_seq_len, cfg.eval.max_target_len)  # noqa: E731
    splits = {"train": enc(ds.train), "validation": enc(ds.validation)}
    if ds.test:
        splits["test"] = enc(ds.test)
    extra = {k: enc(v) for k, v in ds.extra_tests.items()}
    return label_ids, splits, extra


def run(cfg: JobConfig, events: EventWriter, resume: bool, debug: bool = False,
        argv: list[str] | None = None) -> dict:
    """Train one job end to end; returns the finished event."""
    from . import adapters as A
    from .config import resolve_max_steps
    from .models import build_base_model, count_params, load_tokenizer, wrap_peft
    from .tracking import Trackers

    t0 = time.time()
    tr = cfg.train
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(tr.num_threads)
    torch.manual_seed(cfg.seed)
    check_dtype(cfg, device)
    write_env(cfg.output_dir, argv)
    ds = D.load_dataset(cfg.data, cfg.data_dir)
    tokenizer = load_tokenizer(cfg, D.build_tokenizer(ds))
    if not cfg.gla.get("GLA_FORCE_LEFT_PAD", True) and tokenizer.padding_side != "left":
        log("GLA_FORCE_LEFT_PAD=0: keeping right padding; generation runs one prompt at a time")
    else:
        tokenizer.padding_side = "left"
    base = build_base_model(cfg, tokenizer)
    if cfg.model.name_or_path == "tiny-random":
        tokenizer.save_pretrained(str(cfg.output_dir / "tokenizer"))
    label_ids, splits, extra_tests = _encode_all(ds, tokenizer, cfg)
    train_ex = splits["train"]
    pad_id = tokenizer.pad_token_id
    tr.max_steps, steps_why = resolve_max_steps(cfg, len(train_ex))
    if tr.epochs is not None:
        log(f"max_steps: {steps_why}")
    loader_cfg, loader_line = D.dataloader_settings(cfg, len(train_ex), device.type == "cuda")
    log(loader_line)
    if cfg.peft.init_lora_weights == "loraga" and cfg.peft.use_dora:
        raise TrainConfigError("peft: LoRA-GA init together with use_dora is not supported")
    model = wrap_peft(base.to(device), cfg).to(device)
    log(set_logits_to_keep(model, tr.logits_to_keep,
                           cfg.sources.get("train.logits_to_keep", "train.logits_to_keep").replace("env:", "")))
    loss_fn = mean_loss_fn(label_ids, device)
    if cfg.peft.init_lora_weights == "loraga":
        grads = A.estimate_gradients(model, _setup_batches(train_ex, cfg, cfg.peft.loraga_batches, 7919, pad_id),
                                     loss_fn)
        n = A.apply_loraga(model, grads)
        log(f"LoRA-GA: initialised {n} adapted layers from {cfg.peft.loraga_batches} gradient batches")
    ssm = []
    if cfg.peft.method == "sdlora":
        masks = A.sdlora_select(model, cfg, _setup_batches(
            train_ex, cfg, cfg.peft.sdlora_warmup_steps, 104729, pad_id), loss_fn)
        ssm = A.enable_sdlora(model, masks)
        chosen = sum(int(m.sum()) for m in masks.values())
        log(f"SDLoRA: warm-up {cfg.peft.sdlora_warmup_steps} steps selected {chosen} SSM entries "
            f"of {sum(m.numel() for m in masks.values())}")
    if cfg.gla.get("GLA_VERBOSE"):
        log("adapted layers: " + ", ".join(n for n, _ in A.lora_layers(model)))
    ssm_ids = {id(p) for p in ssm}
    params = [p for p in model.parameters() if p.requires_grad and id(p) not in ssm_ids]
    groups = [{"params": params, "weight_decay": tr.weight_decay}]
    if ssm:
        groups.append({"params": ssm, "weight_decay": 0.0})
    optimizer = torch.optim.AdamW(groups, lr=tr.lr, weight_decay=tr.weight_decay)
    trainable, total = count_params(model)
    main_metric = MAIN_METRIC.get(ds.task, "accuracy")

    lr_of, sched_desc, sched_name, warm = lr_schedule(cfg, tr.max_steps)
    log(f"lr schedule: {sched_desc}, peak lr {tr.lr:g}, {tr.max_steps} steps")

    start, best, state = 0, None, {}
    optimizer_state = None
    if resume:
        step0, path = checkpoints(cfg.output_dir)[-1]
        state = load_checkpoint(model, optimizer, path)
        start, best = step0, state.get("best")
        optimizer_state = "restored" if state["optimizer_restored"] else "fresh"
        log(f"resumed from {path.name} at step {start}")
        if not state["optimizer_restored"]:
            log(f"{path.name} holds no optimizer.pt (saved with SAVE_OPTIMIZER_STATE=0): "
                "the optimizer restarts fresh (AdamW moments reset)")
    else:
        torch.manual_seed(cfg.seed + 1)  # same RNG stream at step 1 whatever the adapter setup drew
    trackers = Trackers(cfg, log)
    events.emit("started", pid=os.getpid(), config=cfg.name, model=cfg.model.family,
                device=device.type, trainable_params=trainable, total_params=total,
                seed=cfg.seed, data=cfg.data, resumed_from=start if resume else None,
                max_steps=tr.max_steps, name_or_path=cfg.model.name_or_path,
                peft_method=cfg.peft.method, batch_size=tr.batch_size, grad_accum=tr.grad_accum,
                effective_batch_size=tr.batch_size * tr.grad_accum, dtype=cfg.model.dtype,
                epochs=tr.epochs, train_examples=len(train_ex), lr_scheduler=sched_name,
                warmup_steps=warm, gradient_checkpointing=tr.gradient_checkpointing,
                logits_to_keep=model._lat_ltk[0], dataloader=loader_cfg,
                save_optimizer_state=tr.save_optimizer_state, optimizer_state=optimizer_state,
                report_to=trackers.active)
    log(f"started {cfg.name}: {cfg.model.family} {cfg.model.name_or_path} on {device.type}, "
        f"{cfg.peft.method} trainable {trainable:,} / {total:,} params, data {cfg.data} "
        f"({len(train_ex)} train / {len(splits['validation'])} val"
        f"{' / %d test' % len(splits['test']) if 'test' in splits else ''}), "
        f"batch {tr.batch_size} x accum {tr.grad_accum}, setup {time.time() - t0:.1f}s")

    try:
        step, best = _train_steps(model, optimizer, cfg, tokenizer, ds, splits, extra_tests, train_ex,
                            label_ids, pad_id, loader_cfg, lr_of, start, best, events, trackers,
                            main_metric, device, debug)
    finally:
        trackers.close()
    events.emit("memory", **peak_memory())
    done = events.emit("finished", status="ok", steps=step, best=best,
                       elapsed_s=round(time.time() - t0, 2))
    log(f"finished {cfg.name}: {step} steps, best {best}, {time.time() - t0:.1f}s")
    return done


def _train_steps(model, optimizer, cfg, tokenizer, ds, splits, extra_tests, train_ex, label_ids, pad_id,
                 loader_cfg, lr_of, start, best, events, trackers, main_metric, device, debug) -> tuple:
    """Steps start+1 .. max_steps; returns (last step, best).

    tokens_per_s counts non-padding tokens over the wall time since the previous step event,
    less the time spent evaluating and saving."""
    tr = cfg.train
    model.train()
    step = start
    loader = D.train_loader(train_ex, loader_cfg, tr.batch_size, tr.grad_accum, cfg.seed, start,
                            tr.max_steps, pad_id)
    non_blocking = bool(loader_cfg["pin_memory"])
    t_log, tokens = time.perf_counter(), 0
    for micro in loader:
        step += 1
        lr = lr_of(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        micro = [{k: v.to(device, non_blocking=non_blocking) for k, v in b.items()} for b in micro]
        tokens += sum(int(b["attention_mask"].sum()) for b in micro)
        n_total = sum(int(b["target_mask"][:, 1:].sum()) if "target_mask" in b else len(b["labels"])
                      for b in micro)
        optimizer.zero_grad(set_to_none=True)
        loss_val = 0.0
        for b in micro:
            s_loss, _ = batch_loss(model, b, label_ids)
            (s_loss / max(1, n_total)).backward()
            loss_val += s_loss.item()
        loss_val /= max(1, n_total)
        optimizer.step()
        if not math.isfinite(loss_val):
            raise FloatingPointError(f"loss is {loss_val} at step {step}")
        if step % tr.log_every == 0 or debug:
            now = time.perf_counter()
            tps = tokens / max(now - t_log, 1e-9)
            gpu = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
            events.emit("step", step=step, loss=loss_val, lr=lr, tokens_per_s=round(tps, 1),
                        peak_gpu_bytes=gpu)
            trackers.log({"train/loss": loss_val, "train/lr": lr, "train/tokens_per_s": tps}, step)
            log(f"step {step}/{tr.max_steps} loss {loss_val:.4f} lr {lr:.1e} {tps:,.0f} tok/s")
            t_log, tokens = now, 0
        t_pause = time.perf_counter()
        if step % tr.eval_every == 0 or step == tr.max_steps:
            for split in ("validation", "test"):
                if split not in splits:
                    continue
                metrics, rows = evaluate_split(model, tokenizer, splits[split], ds, cfg, label_ids, split,
                                               extra_tests.get("mm") if split == "test" else None)
                write_predictions(cfg.output_dir, step, split, rows)
                events.emit("eval", step=step, split=split, metrics=metrics)
                trackers.log({f"{split}/{k}": v for k, v in metrics.items()}, step)
                log(f"eval step {step} {split}: " + " ".join(
                    f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
                value = metrics.get(main_metric)
                if split == "validation" and value is not None and (best is None or value > best["value"]):
                    best = {"step": step, "metric": main_metric, "value": value, main_metric: value}
        if step % tr.save_every == 0 or step == tr.max_steps:
            path = save_checkpoint(model, optimizer, cfg.output_dir, step,
                                   {"best": best, "config": cfg.name, "seed": cfg.seed},
                                   save_optimizer=tr.save_optimizer_state)
            events.emit("checkpoint", step=step, path=path.name, optimizer_saved=tr.save_optimizer_state)
            log(f"saved {path.name}" + ("" if tr.save_optimizer_state else " (without optimizer state)"))
        t_log += time.perf_counter() - t_pause
    return step, best


def failed(events: EventWriter | None, exc: BaseException) -> None:
    """Record an exception as a failed event (best effort; never masks the exception)."""
    if events is None:
        return
    try:
        events.emit("failed", error_type=type(exc).__name__, message=str(exc)[:2000])
    except Exception:  # noqa: BLE001 - the original error matters more
        print("could not write failed event", file=sys.stderr)
