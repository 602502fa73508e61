"""The Hugging Face Trainer as LAT runs it: TrainingArguments from the job config, and a small
Trainer subclass for what the project does its own way.

Why a subclass at all: the Trainer brings the step loop, gradient accumulation (with DDP no_sync),
torchrun/accelerate device handling and the report_to integrations; what it cannot know is the
project's label-token loss, its seeded per-step data order, its resume-by-step (the batches of a
resumed run equal those of an uninterrupted one), its generation/classification evaluation and
its checkpoint layout (checkpoint-N/ read by results/scan.py and --resume).  Each override below
is one of those.  Events and log lines come from callbacks.py.  With train.graphs on, the forward
and backward of training_step and the optimizer's step replay CUDA graphs (graphs.py); the
Trainer's loop around them stays as it is.
"""
from __future__ import annotations

import math
import os
import time

import torch
from transformers import Trainer, TrainingArguments

from lat_core.config.job import JobConfig, TrainConfigError


def lr_multiplier(cfg: JobConfig, max_steps: int) -> tuple:
    """(multiplier of the n-th scheduler step (0-based), scheduler name, warm-up steps).

    Shapes come from transformers.get_scheduler; warmup_steps > 0 wins over warmup_ratio; default
    constant_with_warmup when a warm-up is set, else constant."""
    from transformers import get_scheduler
    t = cfg.train
    warm = t.warmup_steps or math.ceil(t.warmup_ratio * max_steps)
    name = t.lr_scheduler or ("constant_with_warmup" if warm else "constant")
    dummy = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=t.lr)
    return get_scheduler(name, dummy, num_warmup_steps=warm, num_training_steps=max_steps).lr_lambdas[0], name, warm


class HostRateLambdaLR(torch.optim.lr_scheduler.LambdaLR):
    """LambdaLR whose get_last_lr is computed on the host.  The Trainer reads it after every
    optimizer step; with a graphed optimizer the group's rate is a device tensor (graphs.py), and
    reading that would wait for the GPU once per step."""

    def get_last_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]


def build_scheduler(optimizer, cfg: JobConfig, max_steps: int, start_step: int):
    """A LambdaLR positioned at `start_step`, so a resumed run uses the rates of an uninterrupted
    one (the scheduler is rebuilt from the step, never loaded)."""
    fn, _, _ = lr_multiplier(cfg, max_steps)
    for group in optimizer.param_groups:  # a restored optimizer carries the last step's rate
        group["lr"] = group["initial_lr"] = cfg.train.lr
    return HostRateLambdaLR(optimizer, lambda n: fn(n + start_step))


def finish_distributed() -> None:
    """Under torchrun: wait for every rank (rank 0 may still be evaluating or saving), then close the
    process group. A rank that exits with gloo's threads still running aborts ("terminate called
    without an active exception", exit -6), and torchrun then reports the whole job failed."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _checkpointing_arguments(enabled: bool) -> dict:
    """Gradient checkpointing (non-reentrant) under the name this transformers release uses:
    ``activation_checkpointing`` in recent 5.x, ``gradient_checkpointing`` before (5.17 has only that)."""
    import dataclasses
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    prefix = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return {prefix: enabled, f"{prefix}_kwargs": {"use_reentrant": False} if enabled else None}


def user_arguments(cfg: JobConfig) -> dict:
    """``train.args``: TrainingArguments fields LAT does not own (the job schema refused those it
    does: lat_core.config.train_args); a name TrainingArguments lacks is refused here, where
    transformers can say which names it has, with the closest one."""
    import dataclasses
    import difflib
    names = [f.name for f in dataclasses.fields(TrainingArguments) if f.init]
    for key in cfg.train.args:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TrainConfigError(f"train.args.{key}: not a field of transformers {transformers_version()} "
                                   f"TrainingArguments{hint}", field=f"train.args.{key}")
    return dict(cfg.train.args)


def transformers_version() -> str:
    import transformers
    return transformers.__version__


def training_arguments(cfg: JobConfig, loader: dict, device: torch.device, debug: bool = False,
                       report_to: list | None = None, run_name: str | None = None) -> TrainingArguments:
    """LAT's TrainingArguments (lat_arguments) with the user's ``train.args`` on top (a field LAT
    only defaults, such as max_grad_norm, takes the user's value); a value TrainingArguments refuses
    is a config error naming train.args."""
    lat, user = lat_arguments(cfg, loader, device, debug, report_to, run_name), user_arguments(cfg)
    try:
        return TrainingArguments(**{**lat, **user})
    except (ValueError, TypeError) as exc:
        if not user:
            raise
        raise TrainConfigError(f"train.args: TrainingArguments refused {user} ({exc})", field="train.args") from None


def lat_arguments(cfg: JobConfig, loader: dict, device: torch.device, debug: bool = False,
                  report_to: list | None = None, run_name: str | None = None) -> dict:
    """TrainingArguments mirroring the job config (every HP_* override lands in cfg first).

    Not mapped on purpose: bf16/fp16 stay off because the weights themselves are cast to
    model.dtype (HP_PREC) as before; AMP on top would change the numerics and fp16 AMP refuses
    fp16 parameters.  max_grad_norm 0: the project never clipped.  The optimizer and the
    schedule are passed in (Trainer(optimizers=...)); lr_scheduler_type / warmup_steps here only
    record what that schedule is, as dataloader_* and eval_accumulation_steps record the settings
    the project's own train loader and evaluation use."""
    t = cfg.train
    _, sched_name, warm = lr_multiplier(cfg, t.max_steps)
    cpu = device.type == "cpu"
    kwargs = {}
    if loader["num_workers"] > 0:
        kwargs.update(dataloader_persistent_workers=loader["persistent_workers"],
                      dataloader_prefetch_factor=loader["prefetch_factor"])
    return dict(
        output_dir=str(cfg.output_dir), run_name=run_name or cfg.name, seed=cfg.seed,
        max_steps=t.max_steps, per_device_train_batch_size=t.batch_size,
        per_device_eval_batch_size=cfg.eval.batch_size or t.batch_size,
        gradient_accumulation_steps=t.grad_accum, learning_rate=t.lr, weight_decay=t.weight_decay,
        lr_scheduler_type=sched_name, warmup_steps=warm, max_grad_norm=0.0,
        logging_strategy="steps", logging_steps=1 if debug else t.log_every,
        # the engine admits an unmeasured config's siblings once it has logged a step: log the first
        logging_first_step=True,
        # a NaN check on every micro-batch would wait for the GPU; the loop checks at log steps
        logging_nan_inf_filter=False,
        eval_strategy="steps", eval_steps=t.eval_every,
        save_strategy="steps", save_steps=t.save_every,
        save_only_model=not t.save_optimizer_state,
        eval_accumulation_steps=t.eval_accumulation_steps or None,
        **_checkpointing_arguments(t.gradient_checkpointing),
        dataloader_num_workers=loader["num_workers"], dataloader_pin_memory=loader["pin_memory"],
        # tensors are copied with non_blocking when the loader pins memory
        accelerator_config={"non_blocking": bool(loader["pin_memory"])},
        report_to=list(t.report_to if report_to is None else report_to) or "none",
        remove_unused_columns=False, disable_tqdm=True, use_cpu=cpu,
        ddp_backend="gloo" if cpu and world_size() > 1 else None,
        ddp_find_unused_parameters=False,
        **kwargs,
    )


class LatTrainer(Trainer):
    """transformers.Trainer with the project's loss, data order, resume point, evaluation and
    checkpoints.  `lat` is the callbacks.LatRun holding the job's state (config, data, events)."""

    # compute_loss divides by the scored tokens of the whole optimisation step (num_items_in_batch),
    # so the Trainer must not divide by gradient_accumulation_steps again
    loss_is_scaled_for_ga = True

    def __init__(self, *args, lat, graphed=None, **kwargs):
        self.lat = lat
        self.graphed = graphed     # graphs.GraphedSteps when the step is captured, else None (eager)
        super().__init__(*args, **kwargs)
        self.step_loss = None      # the current step's loss, on the device (read at log steps only)
        self.step_tokens = 0       # non-padding tokens since the last step event (host ints)
        self.pause_s = 0.0         # eval/save time since the last step event (left out of tokens/s)
        self._label_ids = None     # label token ids as a device tensor, made once

    def get_train_dataloader(self):
        """The project's seeded micro-batch order from the resume step on (data.train_loader)."""
        return self.accelerator.prepare(self.lat.train_loader())

    def _get_num_items_in_batch(self, batch_samples, device):
        """Scored tokens of the whole step, summed from the collate's host-side counts; also
        starts the step's loss and counts its tokens.  Called once per optimisation step."""
        self.step_loss = None
        self.step_tokens += sum(b["n_tokens"] for b in batch_samples)
        return max(1, sum(b["n_scored"] for b in batch_samples))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """Label-token (classification) or target-token (generation) cross entropy, summed over
        the micro-batch and divided by the step's scored tokens: gradient accumulation then
        equals one full batch."""
        from .evaluation import batch_loss, packed_loss
        smoothing = self.args.label_smoothing_factor   # train.args; 0 unless the user sets it
        if "cu_seqlens" in inputs:   # train.pack: one row, no padding (data.packed_batch)
            s_loss = packed_loss(model, inputs, smoothing)
        else:
            if self._label_ids is None:
                self._label_ids = torch.tensor(self.lat.label_ids, dtype=torch.long, device=inputs["input_ids"].device)
            s_loss, _ = batch_loss(model, inputs, self._label_ids, smoothing)
        loss = s_loss / (num_items_in_batch or max(1, inputs["n_scored"]))
        return (loss, None) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        if self.graphed is None:
            loss = super().training_step(model, inputs, num_items_in_batch)
        else:   # the forward and backward of Trainer.training_step, from a captured graph
            model.train()
            first = self.step_loss is None   # reset once per optimisation step
            loss = self.graphed.run(self._prepare_inputs(inputs), num_items_in_batch, first)
        self.step_loss = loss if self.step_loss is None else self.step_loss + loss
        return loss

    def floating_point_ops(self, inputs) -> int:
        # the Trainer would walk every parameter per micro-batch to estimate FLOPs; unused here
        return 0

    def _init_training_state(self, *args, **kwargs):
        """Start the step counter at the resume step: the loader already begins there, so the
        Trainer neither reloads its own checkpoint format nor skips batches."""
        out = super()._init_training_state(*args, **kwargs)
        self.state.global_step = self.lat.start_step
        return out

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        """The project's evaluation (evaluation.evaluate_split) of validation (and test) at the
        Trainer's eval cadence (every eval_steps and the last step); callbacks emit the events."""
        t0 = time.perf_counter()
        results = self.lat.evaluate(self.model, self.state.global_step)
        metrics = {f"{metric_key_prefix}_{split}_{k}": v for split, m in results for k, v in m.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.pause_s += time.perf_counter() - t0
        self.log(dict(metrics))
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _save_checkpoint(self, model, trial) -> None:
        """checkpoint-N in the project's layout (adapter, extra trainables, optimizer unless
        save_only_model, RNG, trainer_state.json), which --resume and results/scan.py read."""
        t0 = time.perf_counter()
        if self.args.should_save:
            self.lat.save(self.model, self.state, save_optimizer=not self.args.save_only_model)
        self.pause_s += time.perf_counter() - t0
