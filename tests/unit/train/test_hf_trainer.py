"""The HF Trainer wiring: the trainer is a transformers.Trainer subclass, TrainingArguments carry
every override the seeds use, the schedule it steps matches lr_schedule, --debug, callbacks."""
import math
from pathlib import Path

import pytest
import torch
import yaml

from lat_core.train import data as D
from lat_core.config.job import parse_config, resolve_max_steps
from lat_core.contract.jobdir import JobDir, Step

ROOT = Path(__file__).resolve().parents[3]
GLA = ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml"


def cfg(tmp_path, environ=None, **train):
    raw = yaml.safe_load(GLA.read_text())
    raw["train"].update(train)
    raw["output_dir"] = str(tmp_path)
    return parse_config(raw, environ=environ or {})


def args_for(c, n_train=200, cuda=False):
    from lat_core.train.hf_trainer import training_arguments
    c.train.max_steps = resolve_max_steps(c, n_train)[0]
    loader, _ = D.dataloader_settings(c, n_train, cuda)
    return training_arguments(c, loader, torch.device("cpu"))


def test_trainer_is_a_transformers_trainer():
    from transformers import Trainer, TrainerCallback

    from lat_core.train.callbacks import EventsCallback, RngCallback
    from lat_core.train.hf_trainer import LatTrainer
    assert issubclass(LatTrainer, Trainer) and LatTrainer.loss_is_scaled_for_ga is True
    assert issubclass(EventsCallback, TrainerCallback) and issubclass(RngCallback, TrainerCallback)


def test_training_arguments_reflect_every_override(tmp_path):
    env = {"HP_BATCH_SIZE": "4", "HP_LR": "0.01", "HP_EPOCHS": "0.5", "HP_PREC": "bf16", "HP_SEED": "9",
           "HP_EVAL_STEPS": "3", "HP_SAVE_STEPS": "5", "HP_LOGGING_STEPS": "2", "HP_GRAD_ACCUM": "2",
           "LR_SCHEDULER_TYPE": "cosine", "LR_WARMUP_RATIO": "0.2", "GRADIENT_CHECKPOINTING": "1",
           "EVAL_ACCUMULATION_STEPS": "4", "NUM_DATA_WORKERS": "2", "DATALOADER_PERSISTENT_WORKERS": "1",
           "DATALOADER_PREFETCH_FACTOR": "3", "SAVE_OPTIMIZER_STATE": "0"}
    a = args_for(cfg(tmp_path, env))
    assert a.max_steps == math.ceil(0.5 * 200 / 8) == 13          # HP_EPOCHS -> steps
    assert (a.per_device_train_batch_size, a.gradient_accumulation_steps) == (4, 2)
    assert (a.learning_rate, a.seed) == (0.01, 9)
    assert (a.eval_strategy, a.eval_steps, a.save_strategy, a.save_steps) == ("steps", 3, "steps", 5)
    assert (a.logging_strategy, a.logging_steps) == ("steps", 2)
    assert (a.lr_scheduler_type, a.warmup_steps) == ("cosine", math.ceil(0.2 * 13))
    ckpt = "activation_checkpointing" if hasattr(a, "activation_checkpointing") else "gradient_checkpointing"
    assert getattr(a, ckpt) and getattr(a, f"{ckpt}_kwargs") == {"use_reentrant": False}
    assert a.eval_accumulation_steps == 4 and a.save_only_model is True
    assert (a.dataloader_num_workers, a.dataloader_persistent_workers, a.dataloader_prefetch_factor) == (2, True, 3)
    assert a.dataloader_pin_memory is False                         # no CUDA here
    # the weights are cast to HP_PREC themselves; no AMP on top
    assert not a.bf16 and not a.fp16
    assert a.remove_unused_columns is False and a.disable_tqdm and a.use_cpu and a.max_grad_norm == 0
    assert a.logging_nan_inf_filter is False                        # no per-step NaN sync
    b = args_for(cfg(tmp_path, {"LR_WARMUP_STEPS": "4", "DATALOADER_PIN_MEMORY": "1"}))
    assert (b.lr_scheduler_type, b.warmup_steps) == ("constant_with_warmup", 4)
    assert b.max_steps == 40 and b.save_only_model is False
    assert b.per_device_train_batch_size == 8 and b.gradient_accumulation_steps == 1
    assert not getattr(b, ckpt) and b.dataloader_num_workers == 0


def test_report_to_and_run_name_reach_the_arguments(tmp_path):
    from lat_core.train.hf_trainer import training_arguments
    c = cfg(tmp_path)
    loader, _ = D.dataloader_settings(c, 200, False)
    a = training_arguments(c, loader, torch.device("cpu"), report_to=["wandb"], run_name="exp-1")
    assert a.report_to == ["wandb"] and a.run_name == "exp-1"
    assert training_arguments(c, loader, torch.device("cpu")).report_to in ("none", [], ["none"])


@pytest.mark.parametrize("env", [{}, {"LR_SCHEDULER_TYPE": "linear"},
                                 {"LR_SCHEDULER_TYPE": "cosine", "LR_WARMUP_STEPS": "3"}])
@pytest.mark.parametrize("start", [0, 4])
def test_scheduler_matches_lr_schedule_from_any_start(tmp_path, env, start):
    from lat_core.train.hf_trainer import build_scheduler
    from lat_core.train.loop import lr_schedule
    c = cfg(tmp_path, env, lr=0.5)
    lr_of = lr_schedule(c, 10)[0]
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.123)  # e.g. a restored last rate
    sched = build_scheduler(opt, c, 10, start)
    for step in range(start + 1, 11):
        assert opt.param_groups[0]["lr"] == pytest.approx(lr_of(step), abs=1e-12), step
        opt.step()
        sched.step()


def test_debug_run_uses_a_few_examples_for_one_epoch(tmp_path, monkeypatch, capsys):
    from lat_core.train import hf_trainer
    from lat_core.train.loop import DEBUG_EXAMPLES, run
    seen = {}
    real_init = hf_trainer.LatTrainer.__init__

    def spy(self, *a, **kw):
        real_init(self, *a, **kw)
        seen["trainer"] = self
    monkeypatch.setattr(hf_trainer.LatTrainer, "__init__", spy)
    c = cfg(tmp_path, log_every=5)
    with JobDir(tmp_path).event_writer() as ev:
        run(c, ev, resume=False, debug=True, argv=["--cfg", "x.yaml"])
    evs = JobDir(tmp_path).read_events().events
    steps = DEBUG_EXAMPLES // 8
    assert evs[0].train_examples == DEBUG_EXAMPLES and evs[0].max_steps == steps
    assert [e.step for e in evs if isinstance(e, Step)] == list(range(1, steps + 1))   # every step
    assert evs[-1].kind == "finished" and evs[-1].steps == steps
    assert "debug: 32 train / 32 validation examples, one epoch = 4 steps" in capsys.readouterr().out
    t = seen["trainer"]
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback

    from lat_core.train.callbacks import EventsCallback
    assert isinstance(t, Trainer) and t.state.global_step == steps and t.args.logging_steps == 1
    names = [type(cb) for cb in t.callback_handler.callbacks]
    assert EventsCallback in names and PrinterCallback not in names
    assert (tmp_path / f"checkpoint-{steps}" / "trainer_state.json").is_file()
