"""The job's state during training (LatRun) and the TrainerCallback that turns the Trainer's
progress into events.jsonl records and train.log lines.

Why the events stay the project's own: the engine, TUI, triage and results read events.jsonl
(started, step, eval, checkpoint, memory, finished, failed) and grep train.log lines such as
"step N/M loss ..."; the Trainer's log_history has neither shape.  report_to trackers get the
Trainer's own logs in addition (callbacks of transformers.integrations).
"""
from __future__ import annotations

import math
import time

import torch
from transformers import EarlyStoppingCallback, TrainerCallback

from . import data as D
from .checkpoints import best_checkpoint_step, checkpoints, copy_adapter, rotate_checkpoints, save_checkpoint
from .evaluation import evaluate_split, write_predictions
from lat_core.contract.jobdir import CheckpointSaved, EarlyStop, Eval, Step
from lat_core.contract.jobdir.names import BEST, checkpoint_folder
from .events import log


class LatRun:
    """What the Trainer subclass and the callback share: config, data, events, best metric, and
    the evaluation and checkpoint writers in the project's formats."""

    def __init__(self, cfg, events, *, tokenizer, ds, splits, extra_tests, train_ex, label_ids, pad_id,
                 loader_cfg, lr_of, start_step, best, main_metric, optimizer, debug, is_main, scores=None,
                 layout=None):
        self.cfg, self.events, self.tokenizer, self.ds = cfg, events, tokenizer, ds
        self.splits, self.extra_tests, self.train_ex = splits, extra_tests, train_ex
        self.label_ids, self.pad_id, self.loader_cfg, self.lr_of = label_ids, pad_id, loader_cfg, lr_of
        self.start_step, self.best, self.main_metric = start_step, best, main_metric
        self.optimizer, self.debug, self.is_main = optimizer, debug, is_main
        self.layout = layout   # data.Layout of the training micro-batches (graphs.layout_for)
        self.last_eval: list[tuple[str, dict]] = []
        self.last_checkpoint = None
        # validation main metric by step (kept across resumes): picks the best checkpoint to keep
        self.scores: dict[int, float] = {int(k): v for k, v in (scores or {}).items()}
        self.best_saved_step: int | None = None

    def train_loader(self):
        """Micro-batches from the resume step on; under torchrun the steps cover every rank's
        share (accelerate hands each rank its micro-batches)."""
        from .hf_trainer import world_size
        tr, w = self.cfg.train, world_size()
        return D.train_loader(self.train_ex, self.loader_cfg, tr.batch_size, tr.grad_accum, self.cfg.seed,
                              self.start_step * w, tr.max_steps * w, self.pad_id, self.layout)

    def evaluate(self, model, step: int) -> list[tuple[str, dict]]:
        """Validation (and test) metrics, predictions files and the best main metric."""
        out = []
        for split in self.eval_splits():
            metrics, rows = evaluate_split(model, self.tokenizer, self.splits[split], self.ds, self.cfg,
                                           self.label_ids, split, self.mm_examples(split))
            out.append(self.record(step, split, metrics, rows))
        self.last_eval = out
        return out

    def eval_splits(self) -> list[str]:
        return [split for split in ("validation", "test") if split in self.splits]

    def mm_examples(self, split: str):
        """MNLI's mismatched examples, scored beside its test split."""
        return self.extra_tests.get("mm") if split == "test" else None

    def record(self, step: int, split: str, metrics: dict, rows: list) -> tuple[str, dict]:
        """A split's evaluation at ``step``: its predictions file, its validation score and the best."""
        if self.is_main:
            write_predictions(self.cfg.output_dir, step, split, rows)
        value = metrics.get(self.main_metric)
        if split == "validation" and value is not None:
            self.scores[step] = value
        if split == "validation" and value is not None and (self.best is None or value > self.best["value"]):
            self.best = {"step": step, "metric": self.main_metric, "value": value, self.main_metric: value}
        return split, metrics

    def save(self, model, hf_state, save_optimizer: bool):
        """checkpoint-N; the best checkpoint's adapter as best/; older checkpoints beyond
        train.save_total_limit deleted (never the best one).  hf_state: the Trainer's TrainerState,
        whose best_* fields are set here (the Trainer sets them only for metric_for_best_model)."""
        out, step = self.cfg.output_dir, hf_state.global_step
        best_step = best_checkpoint_step([s for s, _ in checkpoints(out)] + [step], self.scores)
        hf_state.best_global_step = best_step
        hf_state.best_metric = None if best_step is None else self.scores[best_step]
        hf_state.best_model_checkpoint = None if best_step is None else str(out / checkpoint_folder(best_step))
        lat_state = {"best": self.best, "config": self.cfg.name, "seed": self.cfg.seed,
                     "val_scores": {str(k): v for k, v in self.scores.items()}}
        self.last_checkpoint = save_checkpoint(model, self.optimizer, out, hf_state, lat_state,
                                               save_optimizer=save_optimizer)
        if best_step is not None and (best_step != self.best_saved_step or not (out / BEST).is_dir()):
            copy_adapter(out / checkpoint_folder(best_step), out / BEST)
            self.best_saved_step = best_step
        rotate_checkpoints(out, self.cfg.train.save_total_limit, best_step)
        return self.last_checkpoint


class EventsCallback(TrainerCallback):
    """step / eval / checkpoint events and their log lines.

    tokens_per_s: non-padding tokens (counted by the collate on the CPU, summed over the ranks
    under torchrun) over the wall time since the previous step event, less the time spent
    evaluating and saving; ``tokens`` is that count.  The step loss is read
    (one device sync) only at logging steps, so the GPU can run ahead of Python in between; a
    non-finite loss is therefore caught at the next logging step, not at the step it appears."""

    def __init__(self, run: LatRun):
        self.run = run
        self.trainer = None
        self.t_log = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
        self.t_log = time.perf_counter()
        self.trainer.step_tokens, self.trainer.pause_s = 0, 0.0

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs or self.trainer.step_loss is None:
            return  # eval metrics and the end-of-training summary are not step events
        step, t = state.global_step, self.trainer
        loss = float(t.step_loss)                      # the one sync per logging step
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss is {loss} at step {step}")
        now = time.perf_counter()
        tokens = _job_tokens(t.step_tokens, args.device)
        tps = tokens / max(now - self.t_log - t.pause_s, 1e-9)
        lr = self.run.lr_of(step)
        gpu = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
        logs["tokens_per_s"] = tps                     # the report_to callbacks come after this one
        if state.is_world_process_zero:
            self.run.events.write(Step(step=step, loss=loss, lr=lr, tokens_per_s=round(tps, 1), tokens=tokens,
                                       peak_gpu_bytes=gpu))
            log(f"step {step}/{state.max_steps} loss {loss:.4f} lr {lr:.1e} {tps:,.0f} tok/s")
        self.t_log, t.step_tokens, t.pause_s = now, 0, 0.0

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not state.is_world_process_zero:
            return
        for split, m in self.run.last_eval:
            self.run.events.write(Eval(step=state.global_step, split=split, metrics=m))
            log(f"eval step {state.global_step} {split}: " + " ".join(
                f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items()))

    def on_save(self, args, state, control, **kwargs):
        path = self.run.last_checkpoint
        if not state.is_world_process_zero or path is None:
            return
        saved = not args.save_only_model
        self.run.events.write(CheckpointSaved(step=state.global_step, path=path.name, optimizer_saved=saved))
        log(f"saved {path.name}" + ("" if saved else " (without optimizer state)"))


def _job_tokens(rank_tokens: int, device) -> int:
    """The tokens every rank trained since the last step event: under torchrun each rank counts
    its own share, so the job's tokens/s is their sum (one small all-reduce per logging step)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return rank_tokens
    total = torch.tensor([rank_tokens], dtype=torch.long, device=device)
    dist.all_reduce(total)
    return int(total.item())


class RngCallback(TrainerCallback):
    """Puts the global RNG (dropout) where the project's stream is at step start+1: seed + 1 for a
    fresh run, the checkpoint's state on resume.  Needed because the Trainer reseeds in __init__
    (set_seed); registered last, so no other on_train_begin draws after it, and nothing draws
    between here and the first forward (the loader has its own generator)."""

    def __init__(self, seed: int, rng_state: dict | None):
        self.seed, self.rng_state = seed, rng_state

    def on_train_begin(self, args, state, control, **kwargs):
        rng = self.rng_state
        if rng is None:
            torch.manual_seed(self.seed + 1)
            return
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])


class TrackerConfigCallback(TrainerCallback):
    """Adds the job's own config (never the environment, so no secrets) to the wandb / swanlab run
    that the report_to integrations opened just before (they log TrainingArguments only)."""

    def __init__(self, public: dict, active: list[str]):
        self.public, self.active = public, active

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        if "wandb" in self.active:
            import wandb
            if wandb.run is not None:
                wandb.config.update({"lat": self.public}, allow_val_change=True)
        if "swanlab" in self.active:
            import swanlab
            swanlab.config.update({"lat": self.public})


class MainMetricEarlyStopping(EarlyStoppingCallback):
    """transformers' EarlyStoppingCallback on the job's main validation metric (train.early_stopping).

    Why a subclass: HF's reads ``state.best_metric``, which the Trainer keeps only under
    ``metric_for_best_model`` / ``load_best_model_at_end``; LAT keeps best/ itself (LatRun.save writes
    ``best_metric`` over checkpointed steps only) and owns those arguments. So the best value this
    callback compares with is its own, over every evaluation, and it asks for no argument. The
    counting (patience, threshold = min_delta, higher is better: every main metric is) is HF's."""

    def __init__(self, patience: int, min_delta: float, metric: str):
        super().__init__(early_stopping_patience=patience, early_stopping_threshold=min_delta)
        self.metric = metric              # the main metric's name, as evaluation reports it
        self.best: float | None = None
        self.stopped_at: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        pass   # HF's asserts metric_for_best_model, which LAT does not set (see the class)

    def on_evaluate(self, args, state, control, metrics, **kwargs):
        value = (metrics or {}).get(f"eval_validation_{self.metric}")
        if value is None:
            return   # undefined this time (a constant prediction's MCC): neither better nor worse
        self.check_metric_value(args, state, control, value)
        if self.early_stopping_patience_counter >= self.early_stopping_patience:
            control.should_training_stop = True
            self.stopped_at = state.global_step

    def check_metric_value(self, args, state, control, metric_value):
        if self.best is None or metric_value - self.best > self.early_stopping_threshold:
            self.best, self.early_stopping_patience_counter = metric_value, 0
        else:
            self.early_stopping_patience_counter += 1

    def stop(self, max_steps: int) -> EarlyStop | None:
        """The finished event's account of the stop; None when training ran to ``max_steps``."""
        if self.stopped_at is None:
            return None
        return EarlyStop(self.stopped_at, max_steps, self.metric, self.early_stopping_patience)

    def line(self, max_steps: int) -> str:
        return (f"early stopping: validation {self.metric} did not improve by more than "
                f"{self.early_stopping_threshold:g} in {self.early_stopping_patience} evaluations (best "
                f"{self.best:.4f}); stopped at step {self.stopped_at} of {max_steps}")


def user_callbacks(paths: list[str]) -> list[TrainerCallback]:
    """``train.callbacks``: each ``package.module:Name`` imported; a TrainerCallback class is made
    with no arguments, an instance is used as it is. A config error names the entry at fault."""
    return [_user_callback(i, path) for i, path in enumerate(paths)]


def _user_callback(i: int, path: str) -> TrainerCallback:
    import importlib
    from lat_core.config.job import TrainConfigError
    from lat_core.config.train_args import split_callback
    module_name, attr = split_callback(path)
    where = f"train.callbacks[{i}]"
    try:
        found: object = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise TrainConfigError(f"{where}: cannot import {path!r} ({type(exc).__name__}: {exc})", field=where) from None
    if isinstance(found, type) and issubclass(found, TrainerCallback):
        try:
            return found()
        except TypeError as exc:
            raise TrainConfigError(f"{where}: {path} cannot be made without arguments ({exc})", field=where) from None
    if isinstance(found, TrainerCallback):
        return found
    raise TrainConfigError(f"{where}: {path} is not a transformers TrainerCallback (class or instance)", field=where)
