"""The training loop: steps, evaluation, checkpoints, resume, and the event stream.

Why label-position loss: the task is "sentence: ... label: <word>"; training
on the label token only (cross entropy over the full vocabulary at the position
before it) learns the task fastest, and accuracy compares the logits of the two
label words at that same position.
"""
from __future__ import annotations

import json
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
        for p in list(out.glob("checkpoint-*")) + [out / "tokenizer"]:
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


def label_logits(model, batch) -> torch.Tensor:
    """Logits at the position that predicts the label token (the second to last)."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return out.logits[:, -2, :].float()


def evaluate(model, examples, label_ids, pad_id, batch_size) -> dict:
    """Accuracy (label word with the higher logit) and mean label-token loss."""
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            batch = D.collate(examples[i:i + batch_size], pad_id)
            logits = label_logits(model, batch)
            target = torch.tensor(label_ids)[batch["labels"]]
            loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
            pred = (logits[:, label_ids[1]] > logits[:, label_ids[0]]).long()
            correct += (pred == batch["labels"]).sum().item()
    model.train()
    return {"accuracy": correct / len(examples), "loss": loss_sum / len(examples)}


def save_checkpoint(model, optimizer, out: Path, step: int, state: dict) -> Path:
    """Adapter (save_pretrained), optimizer state and trainer_state.json into checkpoint-<step>.

    trainer_state.json is written last, so a dir without it is an interrupted save.
    """
    path = out / f"checkpoint-{step}"
    model.save_pretrained(str(path))
    torch.save(optimizer.state_dict(), path / "optimizer.pt")
    (path / "trainer_state.json").write_text(json.dumps({**state, "step": step}, indent=1))
    return path


def load_checkpoint(model, optimizer, path: Path) -> dict:
    """Restore adapter weights and optimizer state; returns the trainer state."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = path / "adapter_model.safetensors"
    set_peft_model_state_dict(model, load_file(str(weights)))
    if (path / "optimizer.pt").is_file():
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    return json.loads((path / "trainer_state.json").read_text())


def peak_memory() -> dict:
    """Peak RSS of this process (ru_maxrss is KiB on Linux) and peak CUDA allocation."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gpu = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    return {"peak_rss_bytes": rss, "peak_gpu_bytes": gpu}


def lr_at(step: int, cfg: JobConfig) -> float:
    """Constant learning rate after an optional linear warmup."""
    warm = cfg.train.warmup_steps
    return cfg.train.lr * min(1.0, step / warm) if warm else cfg.train.lr


def run(cfg: JobConfig, events: EventWriter, resume: bool, debug: bool = False) -> dict:
    """Train one job end to end; returns the finished event."""
    from .models import build_base_model, count_params, load_tokenizer, wrap_peft

    t0 = time.time()
    tr = cfg.train
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(tr.num_threads)
    torch.manual_seed(cfg.seed)
    ds = D.load_dataset(cfg.data)
    tokenizer = load_tokenizer(cfg, D.build_tokenizer(ds))
    model = wrap_peft(build_base_model(cfg, tokenizer), cfg).to(device)
    if cfg.model.name_or_path == "tiny-random":
        tokenizer.save_pretrained(str(cfg.output_dir / "tokenizer"))
    label_ids = D.label_token_ids(tokenizer, ds.label_words)
    train_ex = D.encode(ds.train, tokenizer, label_ids, tr.max_seq_len)
    val_ex = D.encode(ds.validation, tokenizer, label_ids, tr.max_seq_len)
    pad_id = tokenizer.pad_token_id
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=tr.lr, weight_decay=tr.weight_decay)
    trainable, total = count_params(model)

    start, best, state = 0, None, {}
    if resume:
        step0, path = checkpoints(cfg.output_dir)[-1]
        state = load_checkpoint(model, optimizer, path)
        start, best = step0, state.get("best")
        log(f"resumed from {path.name} at step {start}")
    events.emit("started", pid=os.getpid(), config=cfg.name, model=cfg.model.family,
                device=device.type, trainable_params=trainable, total_params=total,
                seed=cfg.seed, data=cfg.data, resumed_from=start if resume else None,
                max_steps=tr.max_steps, name_or_path=cfg.model.name_or_path)
    log(f"started {cfg.name}: {cfg.model.family} {cfg.model.name_or_path} on {device.type}, "
        f"trainable {trainable:,} / {total:,} params, data {cfg.data} "
        f"({len(train_ex)} train / {len(val_ex)} val), setup {time.time() - t0:.1f}s")

    model.train()
    step, last_eval, last_save = start, None, None
    for idx in D.train_batches(len(train_ex), tr.batch_size, cfg.seed, start, tr.max_steps):
        step += 1
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = {k: v.to(device) for k, v in D.collate([train_ex[i] for i in idx], pad_id).items()}
        target = torch.tensor(label_ids, device=device)[batch["labels"]]
        loss = F.cross_entropy(label_logits(model, batch), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is {loss.item()} at step {step}")
        if step % tr.log_every == 0 or debug:
            events.emit("step", step=step, loss=loss.item(), lr=lr)
            log(f"step {step}/{tr.max_steps} loss {loss.item():.4f} lr {lr:.1e}")
        if step % tr.eval_every == 0 or step == tr.max_steps:
            metrics = evaluate(model, val_ex, label_ids, pad_id, tr.batch_size)
            last_eval = step
            events.emit("eval", step=step, split="validation", metrics=metrics)
            log(f"eval step {step}: accuracy {metrics['accuracy']:.3f} loss {metrics['loss']:.4f}")
            if best is None or metrics["accuracy"] > best["accuracy"]:
                best = {"step": step, "accuracy": metrics["accuracy"]}
        if step % tr.save_every == 0 or step == tr.max_steps:
            path = save_checkpoint(model, optimizer, cfg.output_dir, step,
                                   {"best": best, "config": cfg.name, "seed": cfg.seed})
            last_save = step
            events.emit("checkpoint", step=step, path=path.name)
            log(f"saved {path.name}")
    del last_eval, last_save
    events.emit("memory", **peak_memory())
    done = events.emit("finished", status="ok", steps=step, best=best,
                       elapsed_s=round(time.time() - t0, 2))
    log(f"finished {cfg.name}: {step} steps, best {best}, {time.time() - t0:.1f}s")
    return done


def failed(events: EventWriter | None, exc: BaseException) -> None:
    """Record an exception as a failed event (best effort; never masks the exception)."""
    if events is None:
        return
    try:
        events.emit("failed", error_type=type(exc).__name__, message=str(exc)[:2000])
    except Exception:  # noqa: BLE001 - the original error matters more
        print("could not write failed event", file=sys.stderr)
