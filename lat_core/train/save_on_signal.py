"""The HF Trainer's side of :mod:`lat_core.train.save_request`: once a save was asked for, the
step that ends saves a checkpoint (through the trainer's own ``_save_checkpoint``, in the
project's layout) and ends training.

Under torchrun every rank must stop at the same step: one that went on would wait forever in the
next step's gradient all-reduce for a rank that left. The signal reaches the ranks at slightly
different moments, so they vote (:class:`RankVote`) and all act on the same result."""

from __future__ import annotations

from transformers import TrainerCallback

from . import save_request
from .events import log


class SaveOnSignalCallback(TrainerCallback):
    def __init__(self) -> None:
        self._vote: RankVote | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self._vote = RankVote()

    def on_step_end(self, args, state, control, **kwargs):
        asked = self._vote.asked_anywhere(save_request.requested()) if self._vote else save_request.requested()
        if asked and not control.should_training_stop:
            save_request.ask()  # a rank the signal had not reached yet stops as one that it had
            if state.is_world_process_zero:
                log(f"asked to save and stop (SIGUSR1): checkpoint at step {state.global_step}")
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._vote is not None:
            self._vote.close()


class RankVote:
    """Each step's end starts an all-reduce (max) of "asked here?" over a gloo group of every rank,
    and reads the one the previous step started: every rank reads the same vote at the same step,
    a request costs one step more, and the wait costs nothing (the all-reduce, on the CPU, ran
    during the step; the GPU is never waited for)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._group = dist.new_group(backend="gloo")  # collective: every rank makes it at the train's begin
        self._pending = None

    def asked_anywhere(self, asked_here: bool) -> bool:
        import torch
        import torch.distributed as dist

        previous = self._result()
        mine = torch.tensor([int(asked_here)], dtype=torch.int32)
        self._pending = (dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=self._group, async_op=True), mine)
        return previous

    def close(self) -> None:
        """The last vote's all-reduce finished (every rank started it) before the group goes."""
        self._result()

    def _result(self) -> bool:
        if self._pending is None:
            return False
        work, votes = self._pending
        self._pending = None
        work.wait()
        return bool(votes.item())
