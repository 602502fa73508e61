"""The HF Trainer's side of :mod:`lat_core.train.save_request`: once a save was asked for, the
step that ends saves a checkpoint (through the trainer's own ``_save_checkpoint``, in the
project's layout) and ends training."""

from __future__ import annotations

from transformers import TrainerCallback

from .events import log
from .save_request import requested


class SaveOnSignalCallback(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if requested() and not control.should_training_stop:
            log(f"asked to save and stop (SIGUSR1): checkpoint at step {state.global_step}")
            control.should_save = True
            control.should_training_stop = True
        return control
