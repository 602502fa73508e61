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
import re
import resource
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from . import data as D
from .config import JobConfig, TrainConfigError
from .events import EventWriter, read_events

CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


def log(msg: str) -> None:
    """Human log line (the engine redirects stdout into train.log)."""
    print(msg, flush=True)


def checkpoints(out: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint dir, ascending."""
    found = []
    if out.is_dir():
        for p in out.iterdir():
            m = CKPT_RE.match(p.name)
            if m and (p / "trainer_state.json").is_file():
                found.append((int(m.group(1)), p))
    return sorted(found)


def prepare_output_dir(out: Path, resume: bool, overwrite: bool) -> None:
    """Apply --resume / --overwrite rules before any heavy import, so refusals are instant."""
    events = out / "events.jsonl"
    if resume and overwrite:
        raise TrainConfigError("--resume and --overwrite exclude each other")
    if overwrite:
        events.unlink(missing_ok=True)
        for p in list(out.glob("checkpoint-*")) + [out / "tokenizer", out / "predictions"]:
            if p.is_dir():
                shutil.rmtree(p)
        return
    if resume:
        if not checkpoints(out):
            raise TrainConfigError(f"--resume: no checkpoint-* directory in {out}")
        return
    if any(e.get("event") == "finished" for e in read_events(events)):
        raise TrainConfigError(f"{events} already holds a finished run; "
                               "pass --overwrite to start again or --resume to continue")


MAIN_METRIC = {"cola": "mcc", "mrpc": "f1", "qqp": "f1", "stsb": "pearson", "samsum": "rougeL",
               "dart": "bleu", "spider": "exec_accuracy"}


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
    return f"logits_to_keep: {setting}" + (" (only the positions the loss needs)" if setting == "auto" else "")


def _forward(model, batch, need: int) -> tuple[torch.Tensor, int]:
    """(logits of the last k positions, k) with k >= need; k = width when all are computed."""
    setting, source, _ = getattr(model, "_lat_ltk", (0, "", 0))
    width = batch["input_ids"].shape[1]
    keep = need if setting == "auto" else setting
    if keep and keep < need:
        raise TrainConfigError(f"{source}={setting}: the loss needs the last {need} positions of this batch")
    kwargs = {"logits_to_keep": keep} if keep and keep < width else {}
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **kwargs)
    return out.logits, out.logits.shape[1]


def label_logits(model, batch) -> torch.Tensor:
    """Logits at the position that predicts the label token (the second to last)."""
    logits, _ = _forward(model, batch, 2)
    return logits[:, -2, :].float()


def batch_loss(model, batch, label_ids) -> tuple[torch.Tensor, int]:
    """(summed loss, number of scored tokens): label token for classification, target tokens else."""
    if "labels" in batch:
        target = torch.tensor(label_ids, device=batch["input_ids"].device)[batch["labels"]]
        return F.cross_entropy(label_logits(model, batch), target, reduction="sum"), len(target)
    need = int(batch["target_mask"].sum(1).max()) + 1
    logits, k = _forward(model, batch, need)
    logits = logits[:, :-1].float()
    tgt = batch["input_ids"][:, -k + 1:]
    mask = batch["target_mask"][:, -k + 1:].bool()
    return F.cross_entropy(logits[mask], tgt[mask], reduction="sum"), int(mask.sum())


def mean_loss_fn(label_ids, device):
    """loss(model, examples) -> mean loss; used by LoRA-GA and the SDLoRA warm-up."""
    def fn(model, batch):
        s, n = batch_loss(model, {k: v.to(device) for k, v in batch.items()}, label_ids)
        return s / max(1, n)
    return fn


def _cls_eval(model, examples, ds, label_ids, pad_id, batch_size, device, accum: int = 0):
    """Predictions, STS-B scores and mean loss; results stay on the device for `accum` batches
    (EVAL_ACCUMULATION_STEPS; 0: moved to the host after every batch)."""
    preds, scores, loss_sum = [], [], 0.0
    pending: list[tuple] = []

    def flush():
        nonlocal loss_sum
        if pending:
            preds.extend(torch.cat([p for p, _, _ in pending]).tolist())
            if ds.task == "stsb":
                scores.extend(torch.cat([s for _, s, _ in pending]).tolist())
            loss_sum += float(torch.stack([lo for _, _, lo in pending]).sum().item())
            pending.clear()

    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            batch = {k: v.to(device) for k, v in D.collate(examples[i:i + batch_size], pad_id).items()}
            logits = label_logits(model, batch)
            target = torch.tensor(label_ids, device=device)[batch["labels"]]
            loss = F.cross_entropy(logits, target, reduction="sum")
            sub = logits[:, label_ids]
            score = None
            if ds.task == "stsb":
                score = (sub.softmax(-1) * torch.arange(len(label_ids), device=device)).sum(-1)
            pending.append((sub.argmax(-1), score, loss))
            if len(pending) >= max(1, accum):
                flush()
        flush()
    return preds, scores, loss_sum / len(examples)


def evaluate_split(model, tokenizer, examples, ds, cfg, label_ids, split, extra=None) -> tuple[dict, list]:
    """Metrics (names as lat_core/results expects) and per-example predictions for one split."""
    from . import metrics as M
    device = next(model.parameters()).device
    bs = cfg.eval.batch_size or cfg.train.batch_size
    pad_id = tokenizer.pad_token_id
    model.eval()
    try:
        if ds.kind == "cls":
            preds, scores, loss = _cls_eval(model, examples, ds, label_ids, pad_id, bs, device,
                                            cfg.train.eval_accumulation_steps)
            golds = [e["label"] for e in examples]
            if ds.task == "stsb":
                gold_scores = [e["score"] for e in examples]
                metrics = {**M.regression(scores, gold_scores), "loss": loss}
                rows = [{"pred": p, "gold": g} for p, g in zip(scores, gold_scores)]
            else:
                metrics = {**M.classification(ds.task, preds, golds), "loss": loss}
                rows = [{"pred": p, "gold": g} for p, g in zip(preds, golds)]
            if extra:  # MNLI mismatched
                mm_preds, _, _ = _cls_eval(model, extra, ds, label_ids, pad_id, bs, device)
                metrics["accuracy_mm"] = M.classification(
                    ds.task, mm_preds, [e["label"] for e in extra])["accuracy"]
            return metrics, rows
        from .generate import generate
        texts = generate(model, tokenizer, [e["prompt_ids"] for e in examples], cfg, bs)
        rows_in = [e["row"] for e in examples]
        if ds.task == "samsum":
            metrics = M.rouge(texts, [r["target"] for r in rows_in])
        elif ds.task == "dart":
            metrics = M.bleu(texts, [r["refs"] for r in rows_in])
        elif ds.task == "spider":
            metrics = M.spider(texts, [r["target"] for r in rows_in], [r["db_id"] for r in rows_in],
                               ds.info["db_root"])
        else:
            metrics = M.rouge(texts, [r["target"] for r in rows_in])
        rows = [{"pred": t, "refs": r["refs"], **({"db_id": r["db_id"]} if "db_id" in r else {})}
                for t, r in zip(texts, rows_in)]
        return metrics, rows
    finally:
        model.train()


def evaluate(model, examples, label_ids, pad_id, batch_size) -> dict:
    """Accuracy and mean label-token loss on a binary classification split (kept for callers)."""
    ds = D.Dataset("x", [], [], kind="cls", task="accuracy")
    preds, _, loss = _cls_eval(model, examples, ds, label_ids, pad_id, batch_size,
                               next(model.parameters()).device)
    model.train()
    acc = sum(int(p == e["label"]) for p, e in zip(preds, examples)) / len(examples)
    return {"accuracy": acc, "loss": loss}


def _extra_params(model) -> dict:
    """Trainable parameters that are not part of the PEFT adapter (SDLoRA's SSM entries)."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad and "lora_" not in n}


def save_checkpoint(model, optimizer, out: Path, step: int, state: dict, save_optimizer: bool = True) -> Path:
    """Adapter (save_pretrained), extra trainables, optimizer + RNG state and trainer_state.json.

    trainer_state.json is written last, so a dir without it is an interrupted save.
    SAVE_OPTIMIZER_STATE=0 (save_optimizer False) leaves optimizer.pt out.
    """
    from safetensors.torch import save_file
    path = out / f"checkpoint-{step}"
    model.save_pretrained(str(path))
    extra = _extra_params(model)
    if extra:
        save_file({n: p.detach().contiguous().cpu() for n, p in extra.items()}, str(path / "extra_trainable.safetensors"))
    torch.save({"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
               path / "rng_state.pt")
    if save_optimizer:
        torch.save(optimizer.state_dict(), path / "optimizer.pt")
    else:
        (path / "optimizer.pt").unlink(missing_ok=True)
    (path / "trainer_state.json").write_text(json.dumps({**state, "step": step,
                                                         "optimizer_saved": save_optimizer}, indent=1))
    return path


def load_checkpoint(model, optimizer, path: Path) -> dict:
    """Restore adapter weights, extra trainables, optimizer and RNG state; returns the trainer state
    with `optimizer_restored` telling whether optimizer.pt was there."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = path / "adapter_model.safetensors"
    set_peft_model_state_dict(model, load_file(str(weights)))
    if (path / "extra_trainable.safetensors").is_file():
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n, t in load_file(str(path / "extra_trainable.safetensors")).items():
                params[n].copy_(t)
    restored = (path / "optimizer.pt").is_file()
    if restored:
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    if (path / "rng_state.pt").is_file():
        rng = torch.load(path / "rng_state.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
    return {**json.loads((path / "trainer_state.json").read_text()), "optimizer_restored": restored}


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


def write_predictions(out: Path, step: int, split: str, rows: list[dict]) -> Path:
    """predictions/step-N-<split>.jsonl, one prediction per example."""
    path = out / "predictions" / f"step-{step}-{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def failed(events: EventWriter | None, exc: BaseException) -> None:
    """Record an exception as a failed event (best effort; never masks the exception)."""
    if events is None:
        return
    try:
        events.emit("failed", error_type=type(exc).__name__, message=str(exc)[:2000])
    except Exception:  # noqa: BLE001 - the original error matters more
        print("could not write failed event", file=sys.stderr)
