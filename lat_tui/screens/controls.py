"""The dashboard's run controls: each key sends one journal command, the engine applies it.

The command's outcome comes back through the journal: the dashboard's poll reads the status of
every command it sent and ``command_answered`` turns it into a notification.
"""

from __future__ import annotations

import time

from lat_core.contract.commands import (FRESH, AddJobs, CancelJob, CancelRun, Command, ExtendCountdown, JobRecord,
                                        PauseRun, RequeueJob, RequeueJobs, ResumeRun, SetSlots, SkipCountdown, Start)
from lat_core.front.client import JOB_FINAL, JOB_UNFINISHED, RUN_ACTIVE, CommandRow, plan_env_of, resumable_checkpoints
from lat_core.errors import LatError
from lat_core.contract.diagnosis import Remedy
from lat_core.contract.rows import JobRow, JobSummary, RunRow
from lat_tui.columns import job_name
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
    ``job_families``, ``_selected`` and ``notify``."""

    context: AppContext
    run_id: int
    _run: RunRow | None
    _jobs: dict[int, JobSummary]
    job_families: dict[int, str]  # job id -> model family, from the last poll
    _selected: int | None

    def _init_controls(self) -> None:
        self._confirming: tuple[object, float] = (None, 0.0)  # what a second press confirms, until when
        self.pending_commands: dict[int, str] = {}  # command id -> what to call it in the answer

    # ------------------------------------------------------------------ sending
    def send_command(self, command: Command, *, label: str = "") -> bool:
        """Write the command; start an engine when the run has none that will read it."""
        run = self._run or self.context.client.run(self.run_id)
        try:
            command_id = self.context.client.send(run, command, start_engine=False)
        except LatError as exc:
            self.notify(str(exc), title="Command not sent", severity="error")
            return False
        self.pending_commands[command_id] = label or command.kind
        if self._run is not None and (self._run.state not in RUN_ACTIVE or not self.engine_alive):
            try:
                self.context.engine_starter(self.context.state_dir, extra_env=plan_env_of(self._run))
            except LatError as exc:
                self.notify(str(exc), title="Command queued; engine cannot start", severity="error")
        return True

    def command_answered(self, command: CommandRow) -> None:
        label = self.pending_commands.pop(command.id, command.kind)
        result = f": {notice_lines(command.result)}" if command.result else ""
        if command.status == "done":
            self.notify(f"{label}: done{result}", timeout=4)
        else:
            self.notify(f"{label}: {command.status}{result}", severity="error", timeout=8)

    def name_of(self, job: JobSummary) -> str:
        """The job table's name for ``job`` (``gla/lora_r8 1:sst2``), which every message uses."""
        return job_name(job, self.job_families.get(job.id))

    def selected_job(self) -> JobSummary | None:
        return self._jobs.get(self._selected) if self._selected else None

    # ------------------------------------------------------------------ actions
    def action_skip_countdown(self) -> None:
        if self._run is None or self._run.state != "countdown":
            self.notify("No countdown is running.", severity="warning")
        elif self.send_command(SkipCountdown(), label="start now"):
            self.notify("Asked the engine to start the run now.")

    def action_extend_countdown(self) -> None:
        if self._run is None or self._run.state != "countdown":
            self.notify("No countdown is running.", severity="warning")
        elif self.send_command(ExtendCountdown(EXTEND_MINUTES), label=f"countdown +{EXTEND_MINUTES} min"):
            self.notify(f"Extending the countdown by {EXTEND_MINUTES} minutes ...")

    def action_cancel_job(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.cancel_job(job)

    def cancel_job(self, job: JobSummary | JobRow) -> None:
        """Cancel a queued job at once; a running one only on a second ``c`` (its work is lost)."""
        if job.state in JOB_FINAL:
            self.notify(f"{self.name_of(job)} is already {job.state}.", severity="warning")
            return
        if job.state == "running" and not self._pressed_twice(("cancel job", job.id),
                                                              f"Press c again to stop {self.name_of(job)} (it is running)."):
            return
        if self.send_command(CancelJob(job.id), label=f"cancel {self.name_of(job)}"):
            self.notify(f"Cancelling {self.name_of(job)} ...")

    def action_cancel_run(self) -> None:
        if self._run is None or self._run.state not in RUN_ACTIVE:
            self.notify("This run is not active.", severity="warning")
        elif self._pressed_twice(("cancel run", self.run_id), "Press C again to cancel the whole run.") and \
                self.send_command(CancelRun(), label=f"cancel run {self.run_id}"):
            self.notify(f"Cancelling run {self.run_id} ...")

    def _pressed_twice(self, what: object, prompt: str) -> bool:
        """True on the second press for the same ``what`` within CONFIRM_SECONDS; the first press
        shows ``prompt``. Work is lost only on two presses, and a press for something else (another
        job selected meanwhile) starts over."""
        pending, until = self._confirming
        if pending == what and time.monotonic() <= until:
            self._confirming = (None, 0.0)
            return True
        self._confirming = (what, time.monotonic() + CONFIRM_SECONDS)
        self.notify(prompt, severity="warning")
        return False

    def action_pause(self) -> None:
        if self._run is not None and self.send_command(PauseRun()):
            self.notify("Pausing: running jobs go on, no new ones start.")

    def action_resume(self) -> None:
        if self._run is not None and self.send_command(ResumeRun()):
            self.notify("Resuming admission ...")

    def action_requeue(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.requeue(job)

    def requeue(self, job: JobSummary, remedy: Remedy | None = None, start: Start | None = None) -> bool:
        """Send the requeue; a failed or cancelled job with checkpoints first gets the resume offer
        (its answer comes back here as ``start``)."""
        if job.state not in REQUEUEABLE:
            self.notify(f"{self.name_of(job)} is {job.state}; only ended jobs can be requeued.", severity="warning")
            return False
        if start is None and remedy is None and job.state in OFFER_RESUME:
            checkpoints = resumable_checkpoints(job.job_dir)
            if checkpoints:
                from lat_tui.screens.resume_offer import ResumeOffer

                self.app.push_screen(ResumeOffer(job, self.name_of(job), checkpoints),
                                     lambda picked: picked and self.requeue(job, start=picked))
                return True
        label = f"requeue {self.name_of(job)}" + (f" with {remedy.key}" if remedy else "") + (f" ({start})" if start else "")
        command = RequeueJob(job.id, start=start or None, remedy=remedy.key if remedy else None)
        if self.send_command(command, label=label):
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

        self.app.push_screen(RequeueFailedConfirm(jobs, self.name_of), lambda start: start and self._requeue_all(jobs, start))

    def unfinished_jobs(self) -> list[JobSummary]:
        return sorted((job for job in self._jobs.values() if job.state in JOB_UNFINISHED), key=lambda job: job.id)

    def _requeue_all(self, jobs: list[JobSummary], start: Start) -> None:
        label = f"requeue {len(jobs)} failed job{'s' if len(jobs) != 1 else ''}" + (" fresh" if start == FRESH else "")
        if self.send_command(RequeueJobs(tuple(job.id for job in jobs), start=start), label=label):
            self.notify(f"{label} ...")

    def action_slots(self, delta: int) -> None:
        device = self._slot_device()
        if device is None:
            self.notify("This run has no devices to change.", severity="warning")
            return
        slots = device.slots + delta
        if slots < 0:
            self.notify(f"{device.id} already has no slots.", severity="warning")
        elif self.send_command(SetSlots(device.id, slots), label=f"{device.id} slots={slots}"):
            self.notify(f"Setting {device.id} to {slots} slot{'s' if slots != 1 else ''} ...")

    def _slot_device(self):
        """The selected job's device (a lat_core Device), else the run's first one."""
        devices = self._run.devices if self._run else []
        job = self.selected_job()
        chosen = next((d for d in devices if job and d.id == job.device), None)
        return chosen or (devices[0] if devices else None)

    def add_jobs(self, jobs: list[JobRecord]) -> None:
        if jobs and self.send_command(AddJobs(tuple(jobs)), label=f"add {len(jobs)} job{'s' if len(jobs) != 1 else ''}"):
            self.notify(f"Adding {len(jobs)} job(s) ...")

