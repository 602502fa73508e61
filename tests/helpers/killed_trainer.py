"""A trainer that dies right after its trackers were handed step N's log, for the tracker resume
tests: the job alone (python -m lat_core.train) crashes (an exception: it fails with exit 1, as
after a CUDA error); a fused group (python -m lat_core.train.fused) is killed with SIGKILL.

    python -m tests.helpers.killed_trainer N alone|fused PIDS_FILE ARGS...

Why the job alone crashes rather than being killed: wandb writes an offline run from its service
process, which keeps nothing of a run whose process was killed (its .wandb file holds only the
header); a fused member's runs are its writer's, which closes them when the group dies.  Before it
dies it writes the pids of its children (a tracker writer, wandb's service) to PIDS_FILE, so a test
can wait until they have closed what they hold.
"""
import os
import signal
import sys
from pathlib import Path


def note_children(pids_file: str) -> None:
    import psutil
    children = psutil.Process().children(recursive=True)
    Path(pids_file).write_text(" ".join(str(p.pid) for p in children))


def kill_alone_after(step: int, pids_file: str) -> None:
    from transformers import TrainerCallback

    from lat_core.train import hf_trainer

    class KillAfterLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.global_step >= step and "loss" in (logs or {}):
                note_children(pids_file)
                raise RuntimeError(f"crashed after step {step} (tests.helpers.killed_trainer)")

    init = hf_trainer.LatTrainer.__init__

    def with_kill(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.add_callback(KillAfterLog())   # the last callback: the report_to ones have the log

    hf_trainer.LatTrainer.__init__ = with_kill


def kill_group_after(step: int, pids_file: str) -> None:
    from lat_core.train.fused.trackers import MemberTrackers
    log_step = MemberTrackers.log_step

    def with_kill(self, at: int, lr: float, tokens_per_s: float) -> None:
        log_step(self, at, lr, tokens_per_s)
        if at >= step:
            note_children(pids_file)
            os.kill(os.getpid(), signal.SIGKILL)

    MemberTrackers.log_step = with_kill


def main() -> int:
    step, mode, pids_file, *argv = sys.argv[1:]
    if mode == "alone":
        kill_alone_after(int(step), pids_file)
        from lat_core.train.__main__ import main as train
    else:
        kill_group_after(int(step), pids_file)
        from lat_core.train.fused.__main__ import main as train
    return train(argv)


if __name__ == "__main__":
    sys.exit(main())
