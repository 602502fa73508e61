"""A fused member's own outputs, in the files and formats a job of its own writes: events.jsonl,
train.log, env.json, evaluation and predictions, checkpoint-N/ (with trainer_state.json), best/ and
final/ adapters, and an exit record per attempt.

Why reuse callbacks.LatRun: evaluation, best-metric bookkeeping, checkpoint layout and rotation
are the single job's code; a member hands it a MemberView, a model that runs the member's rows
through the shared base with only its adapter, and writes its adapter as PEFT does.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

from lat_core.contract.jobdir import ExitRecord, JobDir
from lat_core.contract.jobdir.names import TRAIN_LOG
from . import members as M
from .stacked import BatchLayout



class MemberView(nn.Module):
    """The shared base as member j alone sees it: every row is its row.  Evaluation calls it like
    a PEFT model (forward, get_base_model); save_pretrained writes the member's adapter."""

    def __init__(self, base: nn.Module, slot, member: M.Member, n_jobs: int):
        super().__init__()
        self.base, self.slot, self.member, self.n_jobs = base, slot, member, n_jobs

    def get_base_model(self) -> nn.Module:
        return self.base

    def forward(self, input_ids, attention_mask, **kwargs):
        rows = [0] * self.n_jobs
        rows[self.member.index] = input_ids.shape[0]
        self.slot.current = BatchLayout(rows, attention_mask.cpu(), input_ids.device)
        return self.base(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def save_pretrained(self, path: str) -> None:
        M.save_adapter(self.member, Path(path))


class MemberOut:
    """train.log lines, events, tracker runs (fused.trackers) and the exit record of one member."""

    def __init__(self, cfg, job_dir: Path, events, attempt: int | None, trackers=None):
        self.cfg, self.job_dir, self.events, self.attempt = cfg, Path(job_dir), events, attempt
        self.folder = JobDir(self.job_dir)
        self.trackers = trackers   # fused.trackers.MemberTrackers; None for a config that did not load
        self.t0 = time.time()
        try:
            self._log = self.folder.train_log.open("a", buffering=1)
        except OSError as exc:
            self._log = None
            self._lost(TRAIN_LOG, exc)

    def _lost(self, what: str, exc: BaseException) -> None:
        """The member's folder did not take a write: the group goes on, and its own output says so."""
        print(f"{self.job_dir}: could not write its {what} ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)

    def _tried(self, write, what: str) -> None:
        try:
            write()
        except (OSError, ValueError) as exc:   # ValueError: a file already closed
            self._lost(what, exc)

    def log(self, msg: str) -> None:
        if self._log is not None:
            self._tried(lambda: self._log.write(msg + "\n"), TRAIN_LOG)

    def record_failure(self, exc: BaseException) -> None:
        """Its failed event and error line, each where its folder takes it (the exit record follows,
        exit); a refused config's line reads as a job alone's refusal (the triage of exit 2)."""
        from lat_core.config.job import TrainConfigError

        from lat_core.errors import OutputPathError

        from ..events import failed_event
        if self.events is None:   # no config read: its events beside its job.yaml
            try:
                self.events = self.folder.event_writer()
            except (OSError, OutputPathError) as err:
                self._lost("events", err)
        if self.events is not None:
            self._tried(lambda: self.events.write(failed_event(exc)), "failed event")
        self.log(f"error: {exc}" if isinstance(exc, TrainConfigError) else f"error: {type(exc).__name__}: {exc}")

    def cancel_requested(self) -> bool:
        return self.folder.cancel_requested()

    def exit(self, returncode: int, why: str) -> None:
        """The member's exit record (as lat_core.runner writes one for a process of its own), when
        the group runs under an attempt number; and its last train.log line."""
        if self.trackers is not None:   # its runs close with its state while the others go on
            self.trackers.end(returncode, why)
        self.log(f"[lat] {time.strftime('%Y-%m-%d %H:%M:%S')} left the group: {why} (exit {returncode})")
        if self.attempt is not None:
            self._tried(lambda: self._write_exit_record(returncode, why), "exit record")
        self.close()

    def _write_exit_record(self, returncode: int, why: str) -> None:
        peak = int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else 0
        self.folder.attempt(self.attempt).write_exit(ExitRecord(
            returncode, pid=os.getpid(), started=self.t0, ended=time.time(), max_rss=_rss(), why=why,
            fused_group=True, peak_gpu_bytes=peak))

    def close(self) -> None:
        if self.events is not None:
            self._tried(self.events.close, "events")
        if self._log is not None and not self._log.closed:
            self._tried(self._log.close, TRAIN_LOG)


def _rss() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def trainer_state(step: int, max_steps: int, cfg):
    """transformers' TrainerState for checkpoint-N/trainer_state.json, as the Trainer writes it."""
    from transformers import TrainerState
    t = cfg.train
    return TrainerState(global_step=step, max_steps=max_steps, logging_steps=t.log_every,
                        eval_steps=t.eval_every, save_steps=t.save_every,
                        train_batch_size=t.batch_size)
