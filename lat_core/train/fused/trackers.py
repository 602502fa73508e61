"""A fused member's tracker runs (train.report_to): the run its job alone would get, written by a
writer process of its own (`python -m lat_core.train.fused.trackers`, one per member).

Why a process per member: the single job's runs are written by the HF Trainer's report_to callbacks
(transformers.integrations), which keep one run per process (wandb.run, swanlab's one Run); the
group trains several jobs in one process.  Each writer runs those same callbacks with the member's
own TrainingArguments, the environment tracking.Trackers gives the job alone (run name, group, tags,
log folders) and the logs the Trainer would hand them at the same steps, so name, group, tags,
config, keys and step axis are the single job's.  A writer takes no GPU (CUDA_VISIBLE_DEVICES="")
and its output goes to the member's train.log.

What the group sends (one JSON object a line on the writer's stdin): {"begin": ...} once, then
{"step": N, "logs": {...}} as the Trainer's on_log, and {"end": {"returncode", "why"}} when the
member leaves the group; the writer then closes the runs with the member's state (finished, failed,
cancelled) while the other members go on.  A closed stdin without "end" (the group died) closes
them as crashed.  The writer answers "ready" on its stdout once the runs are open.  A writer that
dies fails its member at its next log, and a member does not finish before its runs opened, so a
tracker that cannot start fails the member as it fails a job alone; nothing is dropped silently.
A live writer is waited for however long it takes, to open the runs and to close them at the
group's end: on a loaded machine its imports alone take minutes, and a deadline failed members whose
tracker was merely slow.  A dead writer ends either wait at once (its end closes the pipe), its
tracker's own limits (wandb.init's init_timeout) fail it as they fail a job alone, and a writer that
hangs is stopped with the group, by a cancel or the end of the job's process tree.

The member's tracker run is the job's one run (tracker_run.py): opened here in the group, which owns
the job folder, and handed to the writer in "begin" (the ids in its environment, what a continued
run already holds, a new run's TensorBoard purge).

Not reproduced: the Trainer's train/grad_norm (a fused member's step computes no gradient norm).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lat_core.contract.jobdir.names import JOB_YAML, TRAIN_LOG
from ..tracker_run import TrackerRun
from ..tracking import Trackers
from .host_copy import HostCopy

CRASHED = {"returncode": 1, "why": "the group process ended without closing the run"}


class TrackerWriterError(RuntimeError):
    """The member's tracker writer died: its runs would stop silently, so the member fails."""


class MemberTrackers:
    """The member's side: which trackers run (tracking.Trackers on a copy of the environment, so
    each member gets the defaults a job alone would and none leaks into another), its writer, and
    the Trainer's bookkeeping of the logged loss (the mean since the last logging step)."""

    def __init__(self, cfg, environ: dict | None = None):
        self.cfg, self.env, self.notes = cfg, dict(os.environ if environ is None else environ), []
        self.trackers = Trackers(cfg, self.notes.append, environ=self.env)   # TrainConfigError: as alone
        self.active = self.trackers.active
        self.run: TrackerRun | None = None          # the job's tracker run, opened at begin
        self.proc: subprocess.Popen | None = None   # the writer
        self.open = False                           # its runs take logs: begun, the member not gone
        self.ready = False                          # the writer said it opened them
        self.log_path: Path | None = None
        self.loss_sum = None          # step losses since the last logging step (on the device)
        self.held: list[HostCopy] = []   # loss sums of logging steps, on their way to the host
        self.total_loss = 0.0         # every logged interval's sum, for train_loss
        self.start = self.last_logged = 0
        self.t0 = time.time()

    def begin(self, job_dir: Path, start: int, facts: dict, resumed: bool) -> None:
        """Start the writer and open the runs (the member trains from step ``start``; ``resumed``:
        it continues the job's tracker run).  facts: what the callbacks read from the model and the run
        (model_facts)."""
        if not self.active:
            return
        self.run = self.trackers.open_run(Path(job_dir), resumed)   # its ids into self.env, the writer's
        self.log_path, self.start, self.last_logged, self.t0 = Path(job_dir) / TRAIN_LOG, start, start, time.time()
        with self.log_path.open("a") as log:   # stdout: the writer's "ready" (main); its own output: the log
            self.proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True,
                                         env={**self.env, "CUDA_VISIBLE_DEVICES": ""})
        self.open, self.ready = True, False
        self._send({"begin": {"job_yaml": str(Path(job_dir) / JOB_YAML), "report_to": self.active,
                              "run_name": self.trackers.run_name, "max_steps": self.cfg.train.max_steps,
                              "start": start, "tracker_run": self.run.as_dict(), **facts}})

    def add_step_loss(self, loss) -> None:
        """A finished optimizer step's loss (a device tensor; read only at logging steps)."""
        if self.open and loss is not None:
            self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss

    def hold_loss(self) -> None:
        """At a logging step, before the next pass is queued: the loss since the last one starts its
        way to the host (HostCopy), so reading it waits for no later pass."""
        if self.loss_sum is not None:
            self.held.append(HostCopy(self.loss_sum))
            self.loss_sum = None

    def log_step(self, step: int, lr: float, tokens_per_s: float) -> None:
        """The Trainer's logging-step logs: the mean loss since its last log, the rate, the epoch."""
        if not self.open:
            return
        loss_sum = self._take_loss()
        self.total_loss += loss_sum
        n, self.last_logged = step - self.last_logged, step
        self._log(step, {"loss": loss_sum / max(n, 1), "learning_rate": lr, "tokens_per_s": tokens_per_s})

    def log_eval(self, step: int, results: list[tuple[str, dict]]) -> None:
        """An evaluation's numbers as LatTrainer.evaluate logs them (eval_<split>_<metric>)."""
        if self.open:
            self._log(step, {f"eval_{split}_{k}": v for split, m in results for k, v in m.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)})

    def log_summary(self, step: int) -> None:
        """The Trainer's end-of-training logs (speed, total_flos, train_loss)."""
        if not self.open:
            return
        self._await_ready()   # a member that finishes before its runs opened: they must open, as alone
        from transformers.trainer_utils import speed_metrics
        tr, trained = self.cfg.train, step - self.start
        samples = tr.batch_size * tr.grad_accum * trained
        metrics = speed_metrics("train", self.t0, num_samples=samples, num_steps=trained)
        total = self.total_loss + self._take_loss()
        self._log(step, {**metrics, "total_flos": 0.0, "train_loss": total / max(trained, 0.001)})

    def end(self, returncode: int, why: str) -> None:
        """The member left the group: its writer closes the runs with its state and exits."""
        if not self.open:
            return
        self.open = False
        try:
            self.proc.stdin.write(json.dumps({"end": {"returncode": returncode, "why": why}}) + "\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass   # the writer already died; wait() says so in the member's log

    def wait(self) -> None:
        """At the group's end: until the writer has closed the runs and exited, however long (see
        the module docstring); the job's process tree is stopped after the group exits."""
        proc, self.proc, self.open = self.proc, None, False
        if proc is None:
            return
        try:
            proc.stdin.close()   # without "end" first: the writer closes the runs as crashed
        except (BrokenPipeError, OSError):
            pass
        rc = proc.wait()
        proc.stdout.close()
        if rc != 0:
            self._note(f"tracker runs ({', '.join(self.active)}): the writer exited with {rc} (its output above)")

    def _await_ready(self) -> None:
        """Until the writer has opened the runs (its "ready" line), however long (see the module
        docstring); a writer that died before raises TrackerWriterError, as a tracker that cannot
        start fails a job alone."""
        if self.ready:
            return
        self.ready = self.proc.stdout.readline().strip() == "ready"   # "": its stdout closed
        if not self.ready:   # its stdout closed: it ended
            self._writer_failed(f"exited with {self.proc.wait()}")

    def _take_loss(self) -> float:
        self.hold_loss()
        held, self.held = self.held, []
        return sum(h.value() for h in held)

    def _log(self, step: int, logs: dict) -> None:
        epoch = (step - self.start) / max(self.cfg.train.max_steps - self.start, 1)   # the Trainer's, its loader from `start`
        self._send({"step": step, "logs": {**logs, "epoch": epoch}})

    def _send(self, message: dict) -> None:
        rc = self.proc.poll()
        try:
            if rc is None:
                self.proc.stdin.write(json.dumps(message, default=str) + "\n")   # a config value JSON lacks: its text
                self.proc.stdin.flush()
                return
        except (BrokenPipeError, OSError):
            rc = self.proc.wait()
        self._writer_failed(f"exited with {rc}")

    def _writer_failed(self, what: str) -> None:
        raise TrackerWriterError(f"the tracker writer ({', '.join(self.active)}) {what}; "
                                 "its output is above in this log")

    def _note(self, line: str) -> None:
        with self.log_path.open("a") as log:
            log.write(line + "\n")


def model_facts(base, member, trainable: int, total: int, device: str, train_examples: int) -> dict:
    """What the report_to callbacks read from the model a job alone trains (a PeftModel): the base's
    config, the adapter's LoraConfig, the parameter counts; and what TrainingArguments are built from."""
    peft = {k: sorted(v) if isinstance(v, set) else v for k, v in member.config.to_dict().items()}
    return {"model_config": json.loads(base.config.to_json_string()), "peft_config": {"default": peft},
            "num_parameters": total, "trainable_parameters": trainable, "device": device,
            "train_examples": train_examples}


class _Config(dict):
    """The base model's config as the callbacks read it (to_dict, to_json_string)."""

    def to_dict(self) -> dict:
        return dict(self)

    def to_json_string(self) -> str:
        return json.dumps(self, indent=2, sort_keys=True) + "\n"


class _Model:
    """The member's model as the report_to callbacks see it (a PeftModel alone)."""

    def __init__(self, facts: dict):
        self.config, self.peft_config = _Config(facts["model_config"]), facts["peft_config"]
        self._counts = facts["trainable_parameters"], facts["num_parameters"]

    def num_parameters(self) -> int:
        return self._counts[1]

    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        return self._counts


class _Runs:
    """The writer's side: the single job's report_to callbacks on the member's arguments."""

    def __init__(self, begin: dict):
        import torch
        from transformers import TrainerControl, TrainerState
        from transformers.integrations import get_reporting_integration_callbacks

        from lat_core.config.job import load_config
        from .. import data as D
        from ..callbacks import TrackerConfigCallback
        from ..hf_trainer import training_arguments
        from ..tracker_run import attach
        from ..tracking import public_config
        cfg = load_config(begin["job_yaml"])
        cfg.train.max_steps = begin["max_steps"]   # as the group resolved it (train.epochs)
        loader, _ = D.dataloader_settings(cfg, begin["train_examples"], begin["device"] == "cuda")
        self.active = begin["report_to"]
        self.args = training_arguments(cfg, loader, torch.device(begin["device"]), report_to=self.active,
                                       run_name=begin["run_name"])
        self.state = TrainerState(global_step=begin["start"], max_steps=begin["max_steps"],
                                  logging_steps=cfg.train.log_every)
        self.control, self.model = TrainerControl(), _Model(begin)
        self.callbacks = [cls() for cls in get_reporting_integration_callbacks(self.active)]
        attach(self.callbacks, TrackerRun(**begin["tracker_run"]))
        self.callbacks.append(TrackerConfigCallback(public_config(cfg), self.active))
        self._each("on_train_begin")

    def log(self, step: int, logs: dict) -> None:
        self.state.global_step, self.state.epoch = step, logs.get("epoch")
        self._each("on_log", logs=logs)

    def end(self, returncode: int, why: str) -> None:
        """Close the runs with the member's state: wandb's exit code, swanlab's state."""
        if returncode == 0:
            self._each("on_train_end")
        if "wandb" in self.active:
            import wandb
            if wandb.run is not None:
                wandb.run.finish(exit_code=returncode if returncode >= 0 else 128 - returncode)
        if "swanlab" in self.active:
            import swanlab
            if swanlab.get_run() is not None:
                state = "success" if returncode == 0 else "aborted" if returncode < 0 else "crashed"
                swanlab.finish(state=state, error=why if state == "crashed" else None)
        for cb in self.callbacks:   # tensorboard: its writer closed (on_train_end only runs on success)
            writer = getattr(cb, "tb_writer", None)
            if writer is not None:
                writer.close()

    def _each(self, event: str, **kwargs) -> None:
        for cb in self.callbacks:
            getattr(cb, event)(self.args, self.state, self.control, model=self.model, **kwargs)


def main() -> int:
    import signal
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)   # the member's end (its stdin) closes the runs, not a signal
    ready = os.dup(1)   # the pipe to the member; the trackers' own prints go to its log
    os.dup2(2, 1)
    lines = (json.loads(line) for line in sys.stdin if line.strip())
    begin = next(lines)["begin"]
    from lat_core.titles import job_label, set_title
    set_title(f"lat tracker: {job_label(begin['job_yaml'])}")   # ps names the member whose runs it writes
    runs = _Runs(begin)
    try:
        os.write(ready, b"ready\n")
    except BrokenPipeError:
        pass   # the group died before the runs opened: what it sent is logged still, and closed as crashed
    finally:
        os.close(ready)
    end = CRASHED
    for message in lines:
        if "end" in message:
            end = message["end"]
            break
        runs.log(message["step"], message["logs"])
    runs.end(end["returncode"], end["why"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
