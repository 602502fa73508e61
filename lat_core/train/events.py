"""The trainer's side of the events: the human log line, and the events that a job alone and a
fused member build alike (their ``started``, ``memory`` and ``failed``), each built here once.

The types, the one writer and the one reader are the contract's (lat_core.contract.jobdir): the
engine, the front ends, triage and results read what is written here.
"""
from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from typing import Any

from lat_core.contract.jobdir import Failed, Memory, SpeedMode, Started
from lat_core.results.metrics import MetricSpec, ranked_by, spec_for


def log(msg: str) -> None:
    """Human log line (the engine redirects stdout into train.log)."""
    print(msg, flush=True)


def ranking_of(ds) -> MetricSpec:
    """The metric a job ranks its evaluations by (best/, early stopping): the task's main metric, or
    the one a user's data names (``data.metric``); its started event records it for the results."""
    return ranked_by(spec_for(ds.task), ds.metric)


def started_event(cfg, *, task: str, ranking: MetricSpec, device: str, trainable: int, total: int, train_examples: int, lr_scheduler: str,
                  warmup_steps: int, logits_to_keep: int | str, resumed_from: int | None,
                  optimizer_state: str | None, report_to: list[str], modes, **own: Any) -> Started:
    """The ``started`` event of a job alone and of a fused member: what the job is (from its
    config), where it runs and how it was set up. ``modes``: the speed modes chosen
    (lat_core.train.graphs.SpeedModes); ``own``: the fields only one of them has (a job alone's
    loader and set-up, a member's ``fused_group``; see Started). ``task``: the dataset's task
    (``Dataset.task``), which decides the metrics and so the results table's main metric."""
    tr = cfg.train
    chosen = modes.event(cfg)
    return Started(pid=os.getpid(), config=cfg.name, model=cfg.model.family, device=device, seed=cfg.seed,
                   data=cfg.data_name, task=task, metric=ranking.main, higher_is_better=ranking.higher_is_better,
                   name_or_path=cfg.model.name_or_path, peft_method=cfg.peft.method,
                   dtype=cfg.model.dtype, trainable_params=trainable, total_params=total, resumed_from=resumed_from,
                   max_steps=tr.max_steps, batch_size=tr.batch_size, grad_accum=tr.grad_accum,
                   effective_batch_size=tr.batch_size * tr.grad_accum, epochs=tr.epochs,
                   train_examples=train_examples, lr_scheduler=lr_scheduler, warmup_steps=warmup_steps,
                   logits_to_keep=logits_to_keep, save_optimizer_state=tr.save_optimizer_state,
                   optimizer_state=optimizer_state, report_to=tuple(report_to),
                   graphs=_speed_mode(chosen["graphs"]), pack=_speed_mode(chosen["pack"]), **own)


def _speed_mode(chosen: Mapping[str, Any]) -> SpeedMode:
    return SpeedMode(chosen["setting"], chosen["on"], chosen["why"])


def memory_event() -> Memory:
    """Peak RSS of this process (ru_maxrss is KiB on Linux) and torch's peak CUDA allocation."""
    import torch
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gpu = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    return Memory(peak_rss_bytes=rss, peak_gpu_bytes=gpu)


def failed_event(exc: BaseException) -> Failed:
    """The trainer's own account of the exception that ends it (the message cut to 2,000 characters)."""
    return Failed(error_type=type(exc).__name__, message=str(exc)[:2000])
