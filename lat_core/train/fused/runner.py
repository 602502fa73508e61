"""Train a fused group: each member logs, evaluates, checkpoints and ends as a job of its own would
(the HF Trainer's cadence: a step event at step 1 and every log_every, evaluation and a checkpoint
every eval_every / save_every and at the last step), and leaves the group when it finishes, fails
(a non-finite loss at a logging step, a micro-batch that cannot be made, its own evaluation,
checkpoint or final adapter, a folder that no longer takes its files) or is cancelled (its cancel
marker; SIGTERM to the group cancels every member).  The others go on.  SIGUSR1 (Slurm's warning
before the time limit) makes every member save a checkpoint and leave to be resumed (save_to_resume).

An error inside the shared forward or backward cannot be put on one member: every member still in
the group fails with it.

A step event is written one pass late where nothing else happens at that step (StepLog): reading a
loss waits for the GPU, and reading it after the next pass is queued lets the host build that pass
while the GPU runs the last one, instead of the two taking turns at every logged step. The loss is
copied to the host at its step's end (host_copy.HostCopy), so that read waits for its own pass and
not for the one queued after it.
"""
from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass

import torch

from .. import save_request
from ..callbacks import LatRun
from lat_core.contract.jobdir import CheckpointSaved, Eval, Finished, Step
from ..events import log, memory_event, ranking_of, started_event
from ..loop import lr_schedule
from .clock import GroupClock
from ..first_step_watch import FirstStepWatch
from .host_copy import HostCopy
from lat_core.contract.jobdir.names import checkpoint_folder
from lat_core.contract.jobdir.outcome import CANCELLED_RC
from .member_io import MemberOut, MemberView, trainer_state
from .step import MemberRun, micro_step
from .trackers import model_facts


@dataclass
class StepLog:
    """A logged step whose event waits for the next pass to be queued: its loss (copied to the host
    behind the step's own pass: HostCopy), learning rate and the tokens trained since the member's
    previous step event."""
    step: int
    loss: HostCopy
    tokens: int
    lr: float


class Member:
    """A member's run state, its files and the single job's bookkeeping (LatRun)."""

    def __init__(self, run: MemberRun, out: MemberOut, lat: LatRun, view: MemberView):
        self.run, self.out, self.lat, self.view = run, out, lat, view
        self.t_log, self.pause = time.perf_counter(), 0.0
        self.left = False
        self.returncode: int | None = None   # how it left the group, as a process of its own would exit
        self.pending: StepLog | None = None  # a step event not yet written (write_step_log)


def make_member(group, j: int, out: MemberOut) -> Member:
    run, data, cfg = group.runs[j], group.data[j], group.runs[j].cfg
    resumed = data.resumed or {}
    lat = LatRun(cfg, out.events, tokenizer=group.tokenizer, ds=data.ds, splits=data.splits,
                 extra_tests=data.extra_tests, train_ex=run.train_ex, label_ids=data.label_ids,
                 pad_id=group.pad_id, loader_cfg=None, lr_of=lr_schedule(cfg, cfg.train.max_steps)[0],
                 start_step=run.step, best=resumed.get("best"), main_metric=ranking_of(data.ds).main,
                 optimizer=run.optimizer, debug=False, is_main=True, scores=resumed.get("val_scores"))
    view = MemberView(group.base, group.slot, run.member, len(group.runs))
    from ..evaluation import set_logits_to_keep
    set_logits_to_keep(view, cfg.train.logits_to_keep)
    return Member(run, out, lat, view)


def started(m: Member, group, resumed: bool, setup_s: dict | None = None) -> None:
    """The member's started event and log lines, and its tracker runs opened; ``setup_s``: where
    the group's start-up went (SetupPhases), the member's as a job alone's is its own."""
    cfg, run = m.run.cfg, m.run
    tr = cfg.train
    trainable = sum(p.numel() for p in run.member.params)
    frozen = sum(p.numel() for n, p in group.base.named_parameters() if "lora_" not in n)
    _, sched_desc, sched_name, warm = lr_schedule(cfg, tr.max_steps)
    tracked = m.out.trackers
    for note in tracked.notes:   # a tracker skipped (not installed), as a job alone logs it
        m.out.log(note)
    from ..models import mamba_path
    mamba_fast, slow_note = mamba_path(cfg.model.family, group.device.type)
    if slow_note:   # the group's kernels are the member's: it says so as a job alone does
        m.out.log(slow_note)
    optimizer_state = None if not resumed else \
        ("restored" if group.data[run.member.index].resumed["optimizer_restored"] else "fresh")
    m.out.events.write(started_event(
        cfg, task=group.data[run.member.index].ds.task, ranking=ranking_of(group.data[run.member.index].ds), device=group.device.type, trainable=trainable, total=frozen + trainable,
        train_examples=len(run.train_ex), lr_scheduler=sched_name, warmup_steps=warm,
        logits_to_keep=m.view._lat_ltk[0], resumed_from=run.step if resumed else None,
        optimizer_state=optimizer_state, report_to=tracked.active, modes=group.modes, fused_group=len(group.runs),
        setup_s=setup_s, mamba_fast_path=mamba_fast, slow_path_warning=slow_note))
    m.out.log(f"started {cfg.name} in a fused group of {len(group.runs)}: {cfg.model.family} "
              f"{cfg.model.name_or_path} on {group.device.type}, {cfg.peft.method} r{cfg.peft.r} trainable "
              f"{trainable:,} params, data {cfg.data_name} ({len(run.train_ex)} train), batch {tr.batch_size} x "
              f"accum {tr.grad_accum}, lr schedule {sched_desc}, peak lr {tr.lr:g}, {tr.max_steps} steps"
              + (f", resumed at step {run.step}" if resumed else ""))
    m.out.log(group.modes.line(" for the group"))
    m.out.log(group.optimizer_line)
    if not run.done:   # a job alone resumed at max_steps trains nothing and opens no runs
        tracked.begin(m.out.job_dir, run.step, model_facts(group.base, run.member, trainable, frozen + trainable,
                                                            group.device.type, len(run.train_ex)), resumed)
    if tracked.run is not None:   # as a job alone says which run it logs to
        m.out.events.write(tracked.run.event(tracked.active))
        m.out.log(tracked.run.line(tracked.active))


def eval_due(m: Member) -> bool:
    """The Trainer's evaluation cadence: every eval_every steps and at the last."""
    return m.run.step % m.run.cfg.train.eval_every == 0 or m.run.step >= m.run.cfg.train.max_steps


def saves_due(m: Member) -> bool:
    """The Trainer's checkpoint cadence: every save_every steps and at the last."""
    return m.run.step % m.run.cfg.train.save_every == 0 or m.run.step >= m.run.cfg.train.max_steps


def log_step(m: Member) -> None:
    """The step's loss to the trackers and, at a logging step, its step event: written now where
    the member evaluates or saves at this step (before the group's evaluation, as the Trainer logs
    before it evaluates, so the event's time is the step's end and not the evaluation's), else left
    pending (m.pending, written by write_step_logs after the next pass is queued)."""
    run, tr = m.run, m.run.cfg.train
    m.out.trackers.add_step_loss(run.step_loss)
    step = run.step
    if step == 1 or step % tr.log_every == 0:
        m.pending = StepLog(step, HostCopy(run.step_loss), run.step_tokens, m.lat.lr_of(step))
        m.out.trackers.hold_loss()   # its loss since its last logging step, copied as this step's
        run.step_tokens = 0
        if eval_due(m) or saves_due(m):
            write_step_log(m)
    run.step_loss = None


def after_step(m: Member, evaluated=None) -> None:
    """Evaluate and save as the Trainer's DefaultFlowCallback would at this step (its step event
    was written by log_step).  evaluated: the member's evaluation at this step when the group ran
    it (fused.evaluation.evaluate_due: its results, or the exception it raised), else None."""
    run, tr = m.run, m.run.cfg.train
    step, saves = run.step, saves_due(m)
    t0 = time.perf_counter()
    if eval_due(m):
        if isinstance(evaluated, BaseException):
            raise evaluated
        results = m.lat.evaluate(m.view, step) if evaluated is None else evaluated
        for split, metrics in results:
            m.out.events.write(Eval(step=step, split=split, metrics=metrics))
            m.out.log(f"eval step {step} {split}: " + " ".join(
                f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
        m.out.trackers.log_eval(step, results)
    if saves:
        path = m.lat.save(m.view, trainer_state(step, tr.max_steps, run.cfg), tr.save_optimizer_state)
        m.out.events.write(CheckpointSaved(step=step, path=path.name, optimizer_saved=tr.save_optimizer_state))
        m.out.log(f"saved {path.name}" + ("" if tr.save_optimizer_state else " (without optimizer state)"))
    m.pause += time.perf_counter() - t0


def write_step_log(m: Member) -> None:
    """The member's pending step event, if any; a non-finite loss raises (the member fails, as at a
    logging step alone).  Tokens/s is over the time since its previous step event, less pauses."""
    entry, m.pending = m.pending, None
    if entry is None:
        return
    value = entry.loss.value()
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {entry.step}")
    now = time.perf_counter()
    tps = entry.tokens / max(now - m.t_log - m.pause, 1e-9)
    gpu = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    m.out.events.write(Step(step=entry.step, loss=value, lr=entry.lr, tokens_per_s=round(tps, 1),
                            tokens=entry.tokens, peak_gpu_bytes=gpu))
    m.out.log(f"step {entry.step}/{m.run.cfg.train.max_steps} loss {value:.4f} lr {entry.lr:.1e} {tps:,.0f} tok/s")
    m.out.trackers.log_step(entry.step, entry.lr, tps)
    m.t_log, m.pause = now, 0.0


def write_step_logs(members: list[Member]) -> None:
    """Every member's pending step event (after the next pass is queued); a member whose loss is
    not finite fails."""
    for m in members:
        if m.pending is not None and not m.left:
            try:
                write_step_log(m)
            except Exception as exc:  # noqa: BLE001 - its loss: its own failure
                fail(m, exc)


def finish(m: Member) -> None:
    from ..checkpoints import save_final
    write_step_log(m)
    save_final(m.view, m.run.cfg.output_dir)
    m.out.events.write(memory_event())
    m.out.trackers.log_summary(m.run.step)
    elapsed = time.time() - m.out.t0
    m.out.events.write(Finished(steps=m.run.step, best=m.lat.best, elapsed_s=round(elapsed, 2)))
    m.out.log(f"finished {m.run.cfg.name}: {m.run.step} steps, best {m.lat.best}, {elapsed:.1f}s")
    leave(m, 0, "finished")


def fail(m: Member, exc: BaseException) -> None:
    _write_pending_quietly(m)
    m.out.record_failure(exc)
    leave(m, 1, f"failed: {type(exc).__name__}")


def finish_or_fail(m: Member) -> None:
    """finish, or, where its own end (its last step event, final adapter, events) fails, fail: the
    member alone."""
    try:
        finish(m)
    except Exception as exc:  # noqa: BLE001 - its own folder or loss: its own failure
        fail(m, exc)


def cancel(m: Member, why: str) -> None:
    _write_pending_quietly(m)
    m.out.log(f"cancelled: {why}")
    leave(m, CANCELLED_RC, "cancelled")


def _write_pending_quietly(m: Member) -> None:
    """Before a member fails or is cancelled: its last step event, if its loss can still be read."""
    try:
        write_step_log(m)
    except Exception:  # noqa: BLE001 - a non-finite loss or a broken device: the failure says why
        pass


def save_to_resume(m: Member) -> None:
    """Asked to save and stop (SIGUSR1: Slurm's warning before the group's time limit, forwarded by
    the runner), as a job alone is (lat_core.train.save_request): the member's last finished step
    saved as a checkpoint (unless that step saved one already) and the member leaves the group to be
    resumed (EXIT_SAVED_TO_RESUME)."""
    run, tr = m.run, m.run.cfg.train
    write_step_log(m)
    m.out.log(f"asked to save and stop (SIGUSR1): checkpoint at step {run.step}")
    saved = m.lat.last_checkpoint
    if saved is None or saved.name != checkpoint_folder(run.step):
        path = m.lat.save(m.view, trainer_state(run.step, tr.max_steps, run.cfg), tr.save_optimizer_state)
        m.out.events.write(CheckpointSaved(step=run.step, path=path.name, optimizer_saved=tr.save_optimizer_state))
        m.out.log(f"saved {path.name}" + ("" if tr.save_optimizer_state else " (without optimizer state)"))
    m.out.log(f"{save_request.SavedToResume(run.step)}; exit {save_request.EXIT_SAVED_TO_RESUME}")
    leave(m, save_request.EXIT_SAVED_TO_RESUME, f"saved at step {run.step} to be resumed")


def save_those_asked(members: list[Member]) -> None:
    """Once a save was asked for: every member still in the group that finished a step saves and
    leaves (one that has not yet finished its first step has nothing to save: it goes on to it)."""
    if not save_request.requested():
        return
    for m in members:
        if not m.left and m.run.step > 0:
            try:
                save_to_resume(m)
            except Exception as exc:  # noqa: BLE001 - its loss or its folder: its own failure
                fail(m, exc)


def leave(m: Member, returncode: int, why: str) -> None:
    m.run.done, m.left, m.returncode = True, True, returncode
    m.out.exit(returncode, why)
    log(f"{m.run.cfg.name}: {why}")


def evaluate_together(group, stepped: list[Member]) -> dict[int, object]:
    """The evaluations due after this pass, members sharing their batches in one pass
    (fused.evaluation); the time they took is a pause in each one's tokens/s, as its own is."""
    from .evaluation import evaluate_due
    due = [m for m in stepped if eval_due(m)]
    if not due:
        return {}
    t0 = time.perf_counter()
    evaluated = evaluate_due(group, due)
    for m in due:
        m.pause += time.perf_counter() - t0
    return evaluated


def train_group(group, members: list[Member]) -> None:
    """Micro-steps until every member has left the group; where the time went in the group's log."""
    stop = {"signal": None}
    old = signal.signal(signal.SIGTERM, lambda signum, _frame: stop.update(signal=signum))
    torch.manual_seed(members[0].run.cfg.seed + 1)   # as RngCallback: the stream starts at seed + 1
    clock = GroupClock()
    try:
        for m in members:
            if m.run.done and not m.left:   # resumed at max_steps: nothing to train
                finish_or_fail(m)
        with FirstStepWatch(lambda: clock.passes > 0, lambda line: log_to_members(members, line)):
            while any(not m.left for m in members):
                for m in members:
                    if not m.left and (stop["signal"] or m.out.cancel_requested()):
                        cancel(m, "SIGTERM to the group" if stop["signal"] else "its cancel marker")
                if all(m.left for m in members):
                    break
                _one_pass(group, members, clock)
    finally:
        signal.signal(signal.SIGTERM, old)
        for m in members:   # their tracker writers close the runs before the job's process tree is stopped
            if m.out.trackers is not None:
                m.out.trackers.wait()
        log(clock.line())


def log_to_members(members: list[Member], line: str) -> None:
    """A line about the whole group in each member's log still training: each is a job, and its log
    pane is where its user looks."""
    for m in members:
        if not m.left:
            m.out.log(line)


def _one_pass(group, members: list[Member], clock: GroupClock) -> None:
    """One micro-step of the group, then what is due after it: the last pass's step events, the
    members' evaluations, logs, checkpoints and ends, a save asked for."""
    try:
        with clock.part("passes"):
            stepped, broken = micro_step(group.base, group.slot, group.runs, group.pad_id, group.device,
                                         group.layout)
    except Exception as exc:  # noqa: BLE001 - the shared pass failed: every member with it
        for m in members:
            if not m.left:
                fail(m, exc)
        raise
    clock.passes += 1
    with clock.part("losses"):
        write_step_logs(members)   # the last pass's: this one is queued behind it
    by_run = {id(m.run): m for m in members}
    for run, exc in broken:
        fail(by_run[id(run)], exc)
    stepped = [run for run in stepped if not by_run[id(run)].left]
    with clock.part("bookkeeping"):
        for run in stepped:
            try:
                log_step(by_run[id(run)])
            except Exception as exc:  # noqa: BLE001 - its loss: its own failure
                fail(by_run[id(run)], exc)
    stepped = [run for run in stepped if not by_run[id(run)].left]
    with clock.part("evaluation"):
        evaluated = evaluate_together(group, [by_run[id(run)] for run in stepped])
    with clock.part("bookkeeping"):
        for run in stepped:
            m = by_run[id(run)]
            try:
                after_step(m, evaluated.get(id(m)))
            except Exception as exc:  # noqa: BLE001 - its loss, evaluation or save: its own failure
                fail(m, exc)
                continue
            if run.done:
                finish_or_fail(m)
        save_those_asked(members)
