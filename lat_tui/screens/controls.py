"""The dashboard's run controls: each key sends one journal command, the engine applies it.

The command's outcome comes back through the journal: the dashboard's poll reads the status of
every command it sent and ``command_answered`` turns it into a notification.
"""

from __future__ import annotations

import time

from lat_core.front.client import JOB_FINAL, JOB_UNFINISHED, RUN_ACTIVE, CommandRow, plan_env_of, resumable_checkpoints
from lat_core.errors import LatError
from lat_core.contract.diagnosis import Remedy
from lat_core.contract.rows import JobSummary, RunRow
from lat_tui.context import AppContext

CONFIRM_SECONDS = 3.0
EXTEND_MINUTES = 5
REQUEUEABLE = JOB_FINAL
OFFER_RESUME = ("failed", "cancelled")  # a succeeded job reruns from scratch
NOTICE_LINES = 6  # an answer with a line per job (requeue --failed) is cut to this in a notification


def notice_lines(result: str) -> str:
    lines = result.splitlines()
    more = len(lines) - NOTICE_LINES
    return "\n".join(lines[:NOTICE_LINES] + ([f"  ... {more} more (the run's history has them all)"] if more > 0 else []))


class RunControls:
    """Mixed into the dashboard screen, which provides ``context``, ``run_id``, ``_run``, ``_jobs``,
    ``_selected`` and ``notify``."""

    context: AppContext
    run_id: int
    _run: RunRow | None
    _jobs: dict[int, JobSummary]
    _selected: int | None

    def _init_controls(self) -> None:
        self._confirm_cancel_until = 0.0
        self.pending_commands: dict[int, str] = {}  # command id -> what to call it in the answer

    # ------------------------------------------------------------------ sending
    def send_command(self, verb: str, job_id: int | None = None, *, label: str = "", **args) -> bool:
        """Write the command; start an engine when the run has none that will read it."""
        run = self._run or self.context.client.run(self.run_id)
        try:
            command_id = self.context.client.send(run, verb, job_id, start_engine=False, **args)
        except LatError as exc:
            self.notify(str(exc), title="Command not sent", severity="error")
            return False
        self.pending_commands[command_id] = label or verb
        if self._run is not None and (self._run.state not in RUN_ACTIVE or not self.engine_alive):
            try:
                self.context.engine_starter(self.context.state_dir, extra_env=plan_env_of(self._run))
            except LatError as exc:
                self.notify(str(exc), title="Command queued; engine cannot start", severity="error")
        return True

    def command_answered(self, command: CommandRow) -> None:
        label = self.pending_commands.pop(command.id, command.verb)
        result = f": {notice_lines(command.result)}" if command.result else ""
        if command.status == "done":
            self.notify(f"{label}: done{result}", timeout=4)
        else:
            self.notify(f"{label}: {command.status}{result}", severity="error", timeout=8)

    def selected_job(self) -> JobSummary | None:
        return self._jobs.get(self._selected) if self._selected else None

    # ------------------------------------------------------------------ actions
    def action_skip_countdown(self) -> None:
        if self._run is None or self._run.state != "countdown":
            self.notify("No countdown is running.", severity="warning")
        elif self.send_command("skip_countdown", label="start now"):
            self.notify("Asked the engine to start the run now.")

    def action_extend_countdown(self) -> None:
        if self._run is None or self._run.state != "countdown":
            self.notify("No countdown is running.", severity="warning")
        elif self.send_command("extend_countdown", minutes=EXTEND_MINUTES, label=f"countdown +{EXTEND_MINUTES} min"):
            self.notify(f"Extending the countdown by {EXTEND_MINUTES} minutes ...")

    def action_cancel_job(self) -> None:
        job = self.selected_job()
        if job is None:
            return
        if job.state in JOB_FINAL:
            self.notify(f"{job.key} is already {job.state}.", severity="warning")
        elif self.send_command("cancel_job", job.id, label=f"cancel {job.key}"):
            self.notify(f"Cancelling {job.key} ...")

    def action_cancel_run(self) -> None:
        if self._run is None or self._run.state not in RUN_ACTIVE:
            self.notify("This run is not active.", severity="warning")
            return
        if time.monotonic() > self._confirm_cancel_until:
            self._confirm_cancel_until = time.monotonic() + CONFIRM_SECONDS
            self.notify("Press C again to cancel the whole run.", severity="warning")
            return
        self._confirm_cancel_until = 0.0
        if self.send_command("cancel_run", label=f"cancel run {self.run_id}"):
            self.notify(f"Cancelling run {self.run_id} ...")

    def action_pause(self) -> None:
        if self._run is None:
            return
        verb = "resume" if self._run.paused else "pause"
        if self.send_command(verb):
            self.notify("Resuming admission ..." if verb == "resume" else
                        "Pausing: running jobs go on, no new ones start.")

    def action_requeue(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.requeue(job)

    def requeue(self, job: JobSummary, remedy: Remedy | None = None, start: str | None = None) -> bool:
        """Send the requeue; a failed or cancelled job with checkpoints first gets the resume offer
        (its answer comes back here as ``start``)."""
        if job.state not in REQUEUEABLE:
            self.notify(f"{job.key} is {job.state}; only ended jobs can be requeued.", severity="warning")
            return False
        if start is None and remedy is None and job.state in OFFER_RESUME:
            checkpoints = resumable_checkpoints(job.job_dir)
            if checkpoints:
                from lat_tui.screens.resume_offer import ResumeOffer

                self.app.push_screen(ResumeOffer(job, checkpoints),
                                     lambda picked: picked and self.requeue(job, start=picked))
                return True
        args = {"remedy": remedy.key} if remedy else {}
        if start:
            args["start"] = start
        label = f"requeue {job.key}" + (f" with {remedy.key}" if remedy else "") + (f" ({start})" if start else "")
        if self.send_command("requeue", job.id, label=label, **args):
            self.notify(f"{label} ...")
            return True
        return False

    def action_requeue_failed(self) -> None:
        """Every failed and cancelled job of the run back to the queue, once confirmed."""
        jobs = self.unfinished_jobs()
        if not jobs:
            self.notify("No failed or cancelled job in this run.", severity="warning")
            return
        from lat_tui.screens.requeue_failed import RequeueFailedConfirm

        self.app.push_screen(RequeueFailedConfirm(jobs), lambda start: start and self._requeue_all(jobs, start))

    def unfinished_jobs(self) -> list[JobSummary]:
        return sorted((job for job in self._jobs.values() if job.state in JOB_UNFINISHED), key=lambda job: job.id)

    def _requeue_all(self, jobs: list[JobSummary], start: str) -> None:
        label = f"requeue {len(jobs)} failed job{'s' if len(jobs) != 1 else ''}" + (" fresh" if start == "fresh" else "")
        if self.send_command("requeue_jobs", jobs=[job.id for job in jobs], start=start, label=label):
            self.notify(f"{label} ...")

    def action_slots(self, delta: int) -> None:
        device = self._slot_device()
        if device is None:
            self.notify("This run has no devices to change.", severity="warning")
            return
        slots = device.slots + delta
        if slots < 0:
            self.notify(f"{device.id} already has no slots.", severity="warning")
        elif self.send_command("set_slots", device=device.id, slots=slots, label=f"{device.id} slots={slots}"):
            self.notify(f"Setting {device.id} to {slots} slot{'s' if slots != 1 else ''} ...")

    def _slot_device(self):
        """The selected job's device (a lat_core Device), else the run's first one."""
        devices = self._run.devices if self._run else []
        job = self.selected_job()
        chosen = next((d for d in devices if job and d.id == job.device), None)
        return chosen or (devices[0] if devices else None)

    def add_jobs(self, jobs: list[dict]) -> None:
        if jobs and self.send_command("add_jobs", jobs=jobs, label=f"add {len(jobs)} job{'s' if len(jobs) != 1 else ''}"):
            self.notify(f"Adding {len(jobs)} job(s) ...")

