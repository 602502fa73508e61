"""One tracker run per job: the run a job's resumes continue, and the logs they must not send again.

A job is one curve.  Its tracker run id is kept in the job folder (JobDir.tracker_run_id) and every
start with --resume (a resume, an on_failure retry or a requeue that continues the job) reuses it:
W&B and SwanLab resume the run with that id (WANDB_RUN_ID / SWANLAB_RUN_ID with resume "allow",
which transformers' WandbCallback and SwanLabCallback pass to their init), TensorBoard writes on in
the same log folder.  A start without --resume trains from step 0 again, so it is a new run: a new
id (W&B and SwanLab keep the old run beside it), and TensorBoard hides the folder's earlier events
(its writer opens with purge_step 0; the files stay).  Either way the job's events.jsonl gets a
``tracker_run`` event and train.log a line saying which.

Why a resumed attempt skips some logs: the attempt that died had logged past its last checkpoint
(steps S+1..L) and the resumed one trains them again from S.  W&B cannot take its run back a step
(its rewind is online only), so what the run already holds - the step and eval events of the
attempts that logged to it, which the trainer writes as it hands the same logs to the trackers - is
not sent again and the curve goes on at L+1, with no duplicate step.  The end-of-training summary is
always sent.

W&B offline keeps each attempt in a folder of its own (offline-run-<time>-<id>); `wandb sync` uploads
the folders of one id, oldest first, into the one run.
"""
from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lat_core.contract.job_files import events_path
from lat_core.contract.jobdir import JobDir
from .events import read_events

EVENT = "tracker_run"
HELD_KINDS = ("step", "eval")    # the events whose logs a continued run already holds
# the trackers that take a run id to resume, and the variables their transformers callbacks read
RESUMED_BY = {"wandb": ("WANDB_RUN_ID", "WANDB_RESUME"), "swanlab": ("SWANLAB_RUN_ID", "SWANLAB_RESUME")}


@dataclass(frozen=True)
class TrackerRun:
    id: str
    continued: bool                    # a resume that continues the job's run
    replaced: str | None = None        # a new run of a job that had one: the run it leaves behind
    held: dict[str, int] = field(default_factory=dict)   # "step" / "eval" -> the last step the run holds

    def holds(self, step: int, logs: dict) -> bool:
        """Whether the run already holds this log (a step a resumed attempt trains again)."""
        kind = log_kind(logs)
        return kind is not None and step <= self.held.get(kind, -1)

    def environ(self, active: list[str]) -> dict[str, str]:
        """The variables that make the active trackers open this run."""
        out = {}
        for name in active:
            if name in RESUMED_BY:
                id_var, resume_var = RESUMED_BY[name]
                out.update({id_var: self.id, resume_var: "allow"})
        return out

    def event(self, active: list[str]) -> dict:
        return {"id": self.id, "continued": self.continued, "replaced": self.replaced, "report_to": list(active),
                "held": dict(self.held)}

    def line(self, active: list[str]) -> str:
        """The train.log line that says whether this attempt continues the job's run or starts one."""
        head = f"tracker run {self.id} ({', '.join(active)})"
        if self.continued:
            held = ", ".join(f"{kind} logs to step {step}" for kind, step in self.held.items())
            return f"{head}: continued" + (f"; it already holds {held}, which are not sent again" if held else "")
        if self.replaced:
            return f"{head}: a new run, as this attempt starts from the beginning; the earlier run {self.replaced} is not continued"
        return f"{head}: a new run"

    def as_dict(self) -> dict:
        return asdict(self)


def log_kind(logs: dict) -> str | None:
    """Which event a Trainer log goes with: "step" (training loss), "eval", or None (the summary)."""
    if "loss" in logs:
        return "step"
    if any(str(key).startswith("eval_") for key in logs):
        return "eval"
    return None


def open_tracker_run(job_dir: Path, resume: bool) -> TrackerRun:
    """The run this attempt logs to: the job's kept run when it resumes, else a new one, kept."""
    folder = JobDir(job_dir)
    kept = folder.tracker_run_id()
    if resume and kept:
        return TrackerRun(kept, True, held=held_steps(events_path(job_dir)))
    run = TrackerRun(secrets.token_hex(8), False, replaced=kept)
    folder.write_tracker_run_id(run.id)
    return run


def held_steps(events: Path) -> dict[str, int]:
    """The last step of each HELD_KINDS event of the attempts that logged to the job's current run:
    from the ``tracker_run`` event that began it, each attempt counted from its own (one that ran
    without trackers sent nothing)."""
    held: dict[str, int] = {}
    logging = False
    for e in read_events(events):
        name = e.get("event")
        if name == "started":
            logging = False
        elif name == EVENT:
            logging = True
            if not e.get("continued"):
                held = {}
        elif logging and name in HELD_KINDS and isinstance(e.get("step"), int):
            held[name] = max(held.get(name, 0), e["step"])
    return held


class SkipHeld:
    """A report_to callback that is not handed the logs its continued run already holds; every
    other event goes to it as it is."""

    def __init__(self, inner, run: TrackerRun):
        self.inner, self.run = inner, run

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and self.run.holds(state.global_step, logs):
            return None
        return self.inner.on_log(args, state, control, logs=logs, **kwargs)


def attach(callbacks: list, run: TrackerRun) -> None:
    """Fit the report_to callbacks in ``callbacks`` (in place) to the run: a continued run's skip
    what it holds; a new run's TensorBoard writer hides the folder's earlier events."""
    from transformers.integrations import INTEGRATION_TO_CALLBACK, TensorBoardCallback
    trackers = tuple(INTEGRATION_TO_CALLBACK.values())
    for i, cb in enumerate(callbacks):
        if not isinstance(cb, trackers):
            continue
        if isinstance(cb, TensorBoardCallback) and not run.continued and cb.tb_writer is None and cb.logging_dir:
            cb.tb_writer = cb._SummaryWriter(log_dir=cb.logging_dir, purge_step=0)
        if run.continued and run.held:
            callbacks[i] = SkipHeld(cb, run)
