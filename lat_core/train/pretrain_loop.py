"""The pretraining loop (torch imported here only). See :mod:`lat_core.train.pretrain`."""

from __future__ import annotations

import contextlib
import math
import os
import resource
import time
from pathlib import Path

import torch
import torch.distributed as dist

from lat_core.contract.jobdir import CheckpointSaved, Eval, Event, EventWriter, Finished, JobDir, Memory, Started, Step
from lat_core.contract.jobdir.names import checkpoint_folder
from lat_core.train.first_step_watch import FirstStepWatch
from lat_core.train.pretrain_config import VOCAB, PretrainConfig


def _distributed() -> tuple[int, int, torch.device]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return rank, world, device


def load_tokens(cfg: PretrainConfig) -> torch.Tensor:
    from lat_core.train.pretrain import TINY_CORPUS

    path = Path(cfg.corpus) if cfg.corpus else TINY_CORPUS
    if not path.is_file():
        raise FileNotFoundError(f"corpus {path} does not exist")
    return torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).long()


def build_model(cfg: PretrainConfig, device: torch.device):
    from .fla_gla import gla_classes, use_gla_kernels_for

    GLAConfig, GLAForCausalLM = gla_classes()
    use_gla_kernels_for(device.type != "cpu")
    config = GLAConfig(hidden_size=cfg.hidden_size, num_hidden_layers=cfg.depth, num_heads=cfg.num_heads,
                       vocab_size=VOCAB, fuse_cross_entropy=False, use_cache=False)
    dtype = getattr(torch, cfg.dtype) if device.type == "cuda" else torch.float32
    return GLAForCausalLM(config).to(device=device, dtype=dtype)


def batch_at(tokens: torch.Tensor, step: int, micro: int, rank: int, world: int, accum: int, cfg, device):
    """Deterministic contiguous windows: each (step, micro, rank) reads its own slice of the stream."""
    rows = cfg.device_batch_size
    index = ((step * accum + micro) * world + rank) * rows
    span = cfg.seq_len + 1
    starts = [((index + r) * cfg.seq_len) % max(1, len(tokens) - span) for r in range(rows)]
    chunk = torch.stack([tokens[s:s + span] for s in starts]).to(device)
    return chunk[:, :-1], chunk[:, 1:]


def lr_at(cfg: PretrainConfig, step: int) -> float:
    if step < cfg.warmup_iterations:
        return cfg.lr * (step + 1) / cfg.warmup_iterations
    progress = (step - cfg.warmup_iterations) / max(1, cfg.num_iterations - cfg.warmup_iterations)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def loss_of(model, inputs, targets) -> torch.Tensor:
    logits = model(input_ids=inputs).logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def run(cfg: PretrainConfig, accum: int, out: Path) -> int:
    rank, world, device = _distributed()
    torch.manual_seed(cfg.seed)
    tokens = load_tokens(cfg)
    model = build_model(cfg, device)
    params = sum(p.numel() for p in model.parameters())
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    if cfg.compile:  # TORCH_COMPILE=1: the first steps pay for the compilation
        ddp = torch.compile(ddp)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    events = JobDir(out).event_writer() if rank == 0 else None
    tracker = _wandb_run(cfg, out) if rank == 0 else None
    _write(events, Started(pid=os.getpid(), config="pretrain", model="gla", device=device.type, world=world,
                           total_params=params, trainable_params=params, grad_accum=accum, pretrain=cfg.to_dict()))
    if rank == 0:
        print(f"pretrain: {params / 1e6:.1f}M params, world {world}, grad_accum {accum}, "
              f"{cfg.total_batch_size} tokens/step, torch.compile {'on' if cfg.compile else 'off'}, "
              f"W&B run {cfg.wandb_run if cfg.uses_wandb else 'none (WANDB_RUN=dummy)'}", flush=True)
    say = (lambda line: print(line, flush=True)) if rank == 0 else (lambda _line: None)
    for step in range(cfg.num_iterations):
        # the first step compiles fla's kernels (minutes on a fresh machine): the log says so meanwhile
        with FirstStepWatch(lambda: False, say) if step == 0 else contextlib.nullcontext():
            loss, seconds = _train_step(ddp, opt, tokens, step, rank, world, accum, cfg, device)
        tok_s = cfg.total_batch_size / seconds
        _write(events, Step(step=step + 1, loss=loss, lr=lr_at(cfg, step), tokens_per_s=tok_s))
        if tracker is not None:
            tracker.log({"train/loss": loss, "train/lr": lr_at(cfg, step), "train/tokens_per_s": tok_s}, step=step + 1)
        if rank == 0:
            print(f"step {step + 1}/{cfg.num_iterations} loss {loss:.4f} {tok_s:,.0f} tok/s", flush=True)
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.num_iterations:
            _write(events, Eval(step=step + 1, metrics={"loss": _eval(model, tokens, cfg, device)}))
        if rank == 0 and (step + 1) % cfg.save_every == 0:
            ckpt = out / checkpoint_folder(step + 1)
            ckpt.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), ckpt / "model.pt")
            _write(events, CheckpointSaved(step=step + 1, path=ckpt.name))
    peak_gpu = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    _write(events, Memory(peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                          peak_gpu_bytes=peak_gpu))
    _write(events, Finished(steps=cfg.num_iterations))
    if tracker is not None:
        tracker.finish()
    if world > 1:
        dist.destroy_process_group()
    return 0


def _train_step(ddp, opt, tokens, step, rank, world, accum, cfg, device) -> tuple[float, float]:
    started = time.perf_counter()
    for group in opt.param_groups:
        group["lr"] = lr_at(cfg, step)
    total = 0.0
    for micro in range(accum):
        inputs, targets = batch_at(tokens, step, micro, rank, world, accum, cfg, device)
        loss = loss_of(ddp, inputs, targets) / accum
        loss.backward()
        total += loss.item()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if world > 1:
        value = torch.tensor([total], device=device)
        dist.all_reduce(value)
        total = value.item() / world
    return total, time.perf_counter() - started


@torch.no_grad()
def _eval(model, tokens, cfg, device) -> float:
    """Loss on the corpus's last windows (held out from nothing: a tiny corpus; a smoke signal)."""
    windows = max(1, min(8, cfg.eval_tokens // cfg.seq_len))
    span = cfg.seq_len + 1
    starts = [max(0, len(tokens) - span * (i + 1)) for i in range(windows)]
    chunk = torch.stack([tokens[s:s + span] for s in starts]).to(device)
    return loss_of(model, chunk[:, :-1], chunk[:, 1:]).item()


def _wandb_run(cfg: PretrainConfig, out: Path):
    """The W&B run WANDB_RUN names (None for dummy); WANDB_PROJECT / WANDB_MODE are wandb's own."""
    if not cfg.uses_wandb:
        return None
    import wandb

    return wandb.init(project=os.environ.get("WANDB_PROJECT", "lat-pretrain"), name=cfg.wandb_run,
                      config=cfg.to_dict(), dir=str(out))


def _write(events: EventWriter | None, event: Event) -> None:
    """Only rank 0 writes events."""
    if events is not None:
        events.write(event)
