"""One fine-tuning job: model, adapters, data and optimizer, then the HF Trainer (hf_trainer.py)
with the project's events, evaluation and checkpoints (callbacks.py).

Why label-position loss: the task is "sentence: ... label: <word>"; training
on the label token only (cross entropy over the full vocabulary at the position
before it) learns the task fastest, and accuracy compares the logits of the two
label words at that same position.
"""
from __future__ import annotations

import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from . import data as D
from lat_core.config.job import JobConfig, TrainConfigError
from lat_core.contract.jobdir import EventWriter, Finished
from .events import failed_event, log, memory_event, ranking_of, started_event
from .checkpoints import checkpoints, load_checkpoint, save_final
from .portable import moves_base_weights, save_initial_adapter
from .record import add_data, write_env
from .setup_phases import SetupPhases
from .first_step_watch import FirstStepWatch
from . import save_request
from .evaluation import (  # noqa: F401 (batch_loss is used by tests through loop)
    batch_loss, mean_loss_fn, set_logits_to_keep,
)

def lr_schedule(cfg: JobConfig, max_steps: int) -> tuple:
    """(lr_of_step, description, name, warmup_steps); lr_of_step(s) is the rate of step s (1-based).

    Shapes come from transformers.get_scheduler (HF convention: step s uses the multiplier of
    s - 1, so warm-up starts at 0); the Trainer runs the same multiplier as a LambdaLR
    (hf_trainer.build_scheduler).  Default: constant_with_warmup when a warm-up is set, else
    constant.  warmup_steps > 0 wins over warmup_ratio.
    """
    from .hf_trainer import lr_multiplier
    t = cfg.train
    fn, name, warm = lr_multiplier(cfg, max_steps)
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


def train_part(rows: list, fraction: float) -> list:
    """The first ``fraction`` of the training rows, at least one (``train.data_fraction``; a sweep's
    screening stage trains on a part): the splits are already in a fixed, shuffled order, so the
    first rows are a fair and reproducible part."""
    return rows if fraction >= 1 else rows[:max(1, math.ceil(len(rows) * fraction))]


def _encode_all(ds, tokenizer, cfg):
    tr = cfg.train
    if ds.kind == "cls":
        label_ids = D.label_token_ids(tokenizer, ds.label_words)
        enc = lambda rows: D.encode(rows, tokenizer, label_ids, tr.max_seq_len)  # noqa: E731
    else:
        label_ids = []
        enc = lambda rows: D.encode_gen(rows, tokenizer, tr.max_seq_len, cfg.eval.max_target_len)  # noqa: E731
    splits = {"train": enc(train_part(ds.train, tr.data_fraction)), "validation": enc(ds.validation)}
    if ds.test:
        splits["test"] = enc(ds.test)
    extra = {k: enc(v) for k, v in ds.extra_tests.items()}
    return label_ids, splits, extra


DEBUG_EXAMPLES = 32   # --debug: train and evaluate on this many examples, for one epoch


def _debug_subset(cfg, splits, extra_tests) -> str:
    """--debug: a few examples of every split, one epoch over them, every step logged."""
    tr = cfg.train
    eff = tr.batch_size * tr.grad_accum
    n = max(DEBUG_EXAMPLES, eff)
    for key in splits:
        splits[key] = splits[key][:n]
    for key in extra_tests:
        extra_tests[key] = extra_tests[key][:n]
    tr.max_steps = max(1, math.ceil(len(splits["train"]) / eff))
    tr.epochs = None
    return (f"debug: {len(splits['train'])} train / {len(splits['validation'])} validation examples, "
            f"one epoch = {tr.max_steps} steps, logging every step")


def run(cfg: JobConfig, events: EventWriter, resume: bool, debug: bool = False,
        argv: list[str] | None = None) -> Finished | None:
    """Train one job end to end with the HF Trainer (hf_trainer.LatTrainer); returns the finished event."""
    from transformers.trainer_callback import PrinterCallback

    from . import adapters as A
    from .callbacks import (EventsCallback, LatRun, MainMetricEarlyStopping, RngCallback, TrackerConfigCallback,
                            user_callbacks)
    from .save_on_signal import SaveOnSignalCallback
    from lat_core.config.job import resolve_max_steps
    from .graphs import GraphedAdamW, GraphedSteps, layout_for, resolve_modes, set_optimizer_mode
    from .hf_trainer import (LatTrainer, build_scheduler, finish_distributed, training_arguments, user_arguments,
                             world_size)
    from .models import build_base_model, count_params, load_tokenizer, mamba_path, wrap_peft
    from .tracker_run import attach as attach_tracker_run
    from .tracking import Trackers, public_config

    t0 = time.time()
    setup = SetupPhases(t0)
    tr = cfg.train
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and os.environ.get("LOCAL_RANK"):   # torchrun: one GPU per rank
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    is_main = int(os.environ.get("RANK", "0")) == 0
    if device.type == "cpu":
        torch.set_num_threads(tr.num_threads)
    torch.manual_seed(cfg.seed)
    check_dtype(cfg, device)
    if is_main:
        write_env(cfg, argv, resume)
    user_arguments(cfg)   # what the user brings fails here, before the data and the model are loaded
    own_callbacks = user_callbacks(tr.callbacks)
    ds = D.load_dataset(cfg.data, cfg.data_dir)
    if is_main:
        add_data(cfg.output_dir, ds)
    tokenizer = load_tokenizer(cfg, D.build_tokenizer(ds))
    setup.lap("data")
    if not cfg.gla.force_left_pad and tokenizer.padding_side != "left":
        log("GLA_FORCE_LEFT_PAD=0: keeping right padding; generation runs one prompt at a time")
    else:
        tokenizer.padding_side = "left"
    base = build_base_model(cfg, tokenizer)
    mamba_fast, fast_note = mamba_path(cfg.model.family, device.type)
    if fast_note and is_main:
        log(fast_note)
    setup.lap("model")
    if cfg.model.name_or_path == "tiny-random" and is_main:
        tokenizer.save_pretrained(str(cfg.output_dir / "tokenizer"))
    label_ids, splits, extra_tests = _encode_all(ds, tokenizer, cfg)
    if debug:
        log(_debug_subset(cfg, splits, extra_tests))
    train_ex = splits["train"]
    pad_id = tokenizer.pad_token_id
    if not debug:
        tr.max_steps, steps_why = resolve_max_steps(cfg, len(train_ex))
        if tr.epochs is not None:
            log(f"max_steps: {steps_why}")
    D.check_fills_grad_accum(len(train_ex), tr.grad_accum)   # a clear error before the Trainer starts
    loader_cfg, loader_line = D.dataloader_settings(cfg, len(train_ex), device.type == "cuda")
    setup.lap("encode")
    log(loader_line)
    modes = resolve_modes(cfg, device, world_size())
    log(modes.line())
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
    if is_main and moves_base_weights(cfg):   # best/ and final/ become plain LoRA against it
        save_initial_adapter(model, cfg.output_dir)
    ssm = []
    if cfg.peft.method == "sdlora":
        masks = A.sdlora_select(model, cfg, _setup_batches(
            train_ex, cfg, cfg.peft.sdlora_warmup_steps, 104729, pad_id), loss_fn)
        ssm = A.enable_sdlora(model, masks)
        chosen = sum(int(m.sum()) for m in masks.values())
        log(f"SDLoRA: warm-up {cfg.peft.sdlora_warmup_steps} steps selected {chosen} SSM entries "
            f"of {sum(m.numel() for m in masks.values())}")
    if cfg.gla.verbose:
        log("adapted layers: " + ", ".join(n for n, _ in A.lora_layers(model)))
    ssm_ids = {id(p) for p in ssm}
    params = [p for p in model.parameters() if p.requires_grad and id(p) not in ssm_ids]
    groups = [{"params": params, "weight_decay": tr.weight_decay}]
    if ssm:   # SDLoRA's SSM entries train without weight decay
        groups.append({"params": ssm, "weight_decay": 0.0})
    optimizer = (GraphedAdamW if modes.graphs else torch.optim.AdamW)(groups, lr=tr.lr, weight_decay=tr.weight_decay)
    trainable, total = count_params(model)
    setup.lap("adapter")
    ranking = ranking_of(ds)  # recorded in the started event: results rank by it too
    main_metric = ranking.main

    lr_of, sched_desc, sched_name, warm = lr_schedule(cfg, tr.max_steps)
    log(f"lr schedule: {sched_desc}, peak lr {tr.lr:g}, {tr.max_steps} steps")

    start, best, rng_state, scores = 0, None, None, None
    optimizer_state = None
    if resume:
        step0, path = checkpoints(cfg.output_dir)[-1]
        state = load_checkpoint(model, optimizer, path)
        start, best, scores = step0, state.get("best"), state.get("val_scores")
        # load_checkpoint restored the RNG; keep it for the start of training (the Trainer reseeds)
        rng_state = {"torch": torch.get_rng_state(),
                     "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        optimizer_state = "restored" if state["optimizer_restored"] else "fresh"
        log(f"resumed from {path.name} at step {start}")
        if not state["optimizer_restored"]:
            log(f"{path.name} holds no optimizer.pt (saved with SAVE_OPTIMIZER_STATE=0): "
                "the optimizer restarts fresh (AdamW moments reset)")
    scheduler = build_scheduler(optimizer, cfg, tr.max_steps, start)
    set_optimizer_mode(optimizer, modes.graphs, device)   # after a restore, which may come from the other mode
    graphed = None
    if modes.graphs:
        graphed = GraphedSteps(model, params, device)
        optimizer.share_pool(graphed.pool)
    trackers = Trackers(cfg, log)
    # one run per job: a resume continues the job's run (nothing opens one for a run already done)
    tracker_run = trackers.open_run(cfg.output_dir, resume) if is_main and start < tr.max_steps else None
    run_state = LatRun(cfg, events, tokenizer=tokenizer, ds=ds, splits=splits, extra_tests=extra_tests,
                       train_ex=train_ex, label_ids=label_ids, pad_id=pad_id, loader_cfg=loader_cfg,
                       lr_of=lr_of, start_step=start, best=best, main_metric=main_metric,
                       optimizer=optimizer, debug=debug, is_main=is_main, scores=scores,
                       layout=layout_for(cfg, modes))
    args = training_arguments(cfg, loader_cfg, device, debug, report_to=trackers.active,
                              run_name=trackers.run_name)
    events_cb = EventsCallback(run_state)
    stopping = tr.stopping and MainMetricEarlyStopping(tr.stopping.patience, tr.stopping.min_delta, main_metric)
    trainer = LatTrainer(model=model, args=args, optimizers=(optimizer, scheduler), lat=run_state, graphed=graphed,
                         eval_dataset={k: v for k, v in splits.items() if k != "train"},
                         callbacks=[TrackerConfigCallback(public_config(cfg), trackers.active), *own_callbacks,
                                    *([stopping] if stopping else []), RngCallback(cfg.seed, rng_state),
                                    SaveOnSignalCallback()])
    trainer.remove_callback(PrinterCallback)   # the project's own log lines replace its dict prints
    if tracker_run is not None:
        attach_tracker_run(trainer.callback_handler.callbacks, tracker_run)
    # events first among the callbacks, so on_log adds tokens_per_s before the trackers log
    trainer.callback_handler.callbacks.insert(1, events_cb)
    events_cb.trainer = trainer
    setup.lap("trainer")
    if is_main:
        events.write(started_event(
            cfg, task=ds.task, ranking=ranking, device=device.type, trainable=trainable, total=total, train_examples=len(train_ex),
            lr_scheduler=sched_name, warmup_steps=warm, logits_to_keep=model._lat_ltk[0],
            resumed_from=start if resume else None, optimizer_state=optimizer_state, report_to=trackers.active,
            modes=modes, gradient_checkpointing=tr.gradient_checkpointing, dataloader=loader_cfg,
            setup_s=setup.phases, mamba_fast_path=mamba_fast, slow_path_warning=fast_note))
    if tracker_run is not None:
        events.write(tracker_run.event(trackers.active))
        log(tracker_run.line(trackers.active))
    log(f"started {cfg.name}: {cfg.model.family} {cfg.model.name_or_path} on {device.type}, "
        f"{cfg.peft.method} trainable {trainable:,} / {total:,} params, data {cfg.data_name} "
        f"({len(train_ex)} train / {len(splits['validation'])} val"
        f"{' / %d test' % len(splits['test']) if 'test' in splits else ''}), "
        f"batch {tr.batch_size} x accum {tr.grad_accum}, setup {setup}")

    if start < tr.max_steps:   # resuming a run that already reached max_steps trains nothing
        with FirstStepWatch(lambda: trainer.state.global_step > start, log if is_main else lambda _line: None):
            trainer.train()
    step, best = max(trainer.state.global_step, start), run_state.best
    if stopping and stopping.stopped_at is not None and is_main:
        log(stopping.line(tr.max_steps))
    finish_distributed()
    stopped_early = stopping and stopping.stopped_at is not None  # done: nothing to resume
    if save_request.requested() and step < tr.max_steps and not stopped_early:  # saved at the time-limit warning
        raise save_request.SavedToResume(step)
    if not is_main:
        return None
    save_final(model, cfg.output_dir)   # the adapter as training left it
    events.write(memory_event())
    done = events.write(Finished(steps=step, best=best, elapsed_s=round(time.time() - t0, 2),
                                 stopped_early=stopping.stop(tr.max_steps) if stopping else None))
    log(f"finished {cfg.name}: {step} steps, best {best}, {time.time() - t0:.1f}s")
    return done


def failed(events: EventWriter | None, exc: BaseException) -> None:
    """Record an exception as a failed event (best effort; never masks the exception)."""
    if events is None:
        return
    try:
        events.write(failed_event(exc))
    except Exception:  # noqa: BLE001 - the original error matters more
        print("could not write failed event", file=sys.stderr)
