"""Commands front ends send through the journal, applied by the engine (the only state writer).

Each command type (``lat_core/contract/commands.py``) has exactly one handler here, named in
:meth:`Commands.handlers`. Each handler returns (status, result); the journal records it as a
transition, so every command shows up in the run's (and, for job commands, the job's) history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lat_core.contract.commands import (AddJobs, CancelJob, CancelRun, Command, ExtendCountdown, PauseRun, RequeueJob,
                                        RequeueJobs, ResumeRun, SetSlots, SkipCountdown, Undecodable)
from lat_core.engine.faults import JOURNAL_ERRORS
from lat_core.engine.remedy import apply_remedy
from lat_core.engine.requeue import restart_argv, start_said, waiting_step
from lat_core.contract.jobdir import JobDir
from lat_core.contract.states import JOB_FINAL, JOB_UNFINISHED, RUN_ACTIVE, RUN_ENDED, JobState, RunState
from lat_core.contract.journal import RunRow

if TYPE_CHECKING:
    from lat_core.engine.loop import Engine

Result = tuple[str, str]
Handler = Callable[[RunRow, Any], Result]  # its command's type is the key it has in the table


class Commands:
    def __init__(self, engine: "Engine"):
        self.engine = engine
        self.store = engine.store
        self._handlers = self.handlers()

    def handlers(self) -> dict[type[Command], Handler]:
        """The one handler of each command type (a test ties it to every type of the contract)."""
        return {
            SkipCountdown: self.skip_countdown, ExtendCountdown: self.extend_countdown,
            CancelRun: self.cancel_run, PauseRun: self.pause, ResumeRun: self.resume, SetSlots: self.set_slots,
            AddJobs: self.add_jobs, CancelJob: self.cancel_job, RequeueJob: self.requeue,
            RequeueJobs: self.requeue_jobs,
        }

    def answer(self, run: RunRow, command: Command | Undecodable) -> Result:
        """Apply the command; a row that did not decode is rejected with why, and a handler's
        error is answered as failed: a bad command never stops the engine (a journal fault does)."""
        if isinstance(command, Undecodable):
            return "rejected", command.reason
        try:
            return self._handlers[type(command)](run, command)
        except JOURNAL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad command is answered, never fatal
            return "failed", f"engine error: {type(exc).__name__}: {exc}"

    # ---------------------------------------------------------------- countdown
    def skip_countdown(self, run: RunRow, _command: SkipCountdown) -> Result:
        if run.state is not RunState.COUNTDOWN:
            return "rejected", "no countdown is running"
        self.store.set_countdown(run.id, self.engine.now())
        return "done", "countdown skipped"

    def extend_countdown(self, run: RunRow, command: ExtendCountdown) -> Result:
        if run.state is not RunState.COUNTDOWN:
            return "rejected", "no countdown is running"
        minutes = command.minutes
        self.store.set_countdown(run.id, run.countdown_until + minutes * 60)
        return "done", f"countdown extended by {minutes:g} min"

    # ---------------------------------------------------------------- run
    def cancel_run(self, run: RunRow, _command: CancelRun) -> Result:
        for job in self.store.jobs(run.id):
            if job.state not in JOB_FINAL:
                self.engine.cancel(job)
        self.store.set_run_state(run.id, RunState.CANCELLING, "cancelled by user")
        return "done", "run cancelled: nothing new starts, running jobs are stopped"

    def pause(self, run: RunRow, _command: PauseRun) -> Result:
        if run.state not in RUN_ACTIVE:
            return "rejected", f"run {run.id} is {run.state}; only an active run can be paused"
        if run.paused:
            return "rejected", "admission is already paused"
        self.store.set_paused(run.id, True)
        return "done", "admission paused; running jobs go on"

    def resume(self, run: RunRow, _command: ResumeRun) -> Result:
        if run.state not in RUN_ACTIVE and not run.paused:
            return "rejected", f"run {run.id} is {run.state}; only an active run can be resumed"
        if not run.paused:
            return "rejected", "admission is not paused"
        self.store.set_paused(run.id, False)
        return "done", "admission resumed"

    def set_slots(self, run: RunRow, command: SetSlots) -> Result:
        device_id, slots = command.device, command.slots
        if slots < 0:
            return "rejected", f"slots must be an integer >= 0, got {slots!r}"
        match = next((d for d in run.devices if d.id == device_id), None)
        if match is None:
            return "rejected", f"no device {device_id!r} in this run ({', '.join(d.id for d in run.devices)})"
        self.store.set_devices(run.id, [d.with_slots(slots) if d is match else d for d in run.devices])
        old = match.slots
        return "done", f"{device_id}: {old} -> {slots} slots"

    def add_jobs(self, run: RunRow, command: AddJobs) -> Result:
        jobs = command.jobs
        existing = {j.key for j in self.store.jobs(run.id)}
        clash = [j["key"] for j in jobs if j["key"] in existing]
        if clash:
            return "rejected", f"jobs already in this run: {', '.join(clash[:3])}"
        self.store.add_jobs(run.id, jobs)
        if run.state in RUN_ENDED:
            self.store.set_run_state(run.id, RunState.RUNNING, "jobs added")
        return "done", f"{len(jobs)} jobs added"

    # ---------------------------------------------------------------- jobs
    def cancel_job(self, run: RunRow, command: CancelJob) -> Result:
        job = self.store.job(command.job_id)
        if job.state in JOB_FINAL:
            return "rejected", f"job is already {job.state}"
        self.engine.cancel(job)
        return "done", f"cancel sent to {job.key}"

    def requeue(self, run: RunRow, command: RequeueJob) -> Result:
        job = self.store.job(command.job_id)
        if job.state not in JOB_FINAL and not self._stuck(job):
            return "rejected", (f"job is {job.state}; only finished, failed or cancelled jobs are requeued"
                                " (cancel it first)")
        start, remedy = command.start, command.remedy
        if remedy:
            try:
                applied = apply_remedy(self.store, run, job, remedy)
            except ValueError as exc:
                return "rejected", str(exc)
        job = self.store.job(job.id)  # as the remedy left it
        said = start_said(restart_argv(job.argv, job.state is JobState.SUCCEEDED, start), job.job_dir)
        detail = (f"requeued with remedy {remedy}: {applied}" if remedy else "requeued by user") + f" ({said})"
        self._back_to_queue(run, job, start, detail)
        self._reopen(run, "job requeued")
        return "done", f"{job.key} requeued"

    def requeue_jobs(self, run: RunRow, command: RequeueJobs) -> Result:
        """The listed failed or cancelled jobs back to the queue (``lat-tui requeue --failed``), in
        one journal transaction: all of them or, when one cannot be, none."""
        start = command.start
        jobs, problem = self._unfinished(run, command.job_ids)
        if problem:
            return "rejected", f"nothing was requeued: {problem}"
        got = [(job, *JobDir(job.job_dir).requeue_start(start)) for job in jobs]
        with self.store.batch():
            for job, flag, said in got:
                self._back_to_queue(run, job, flag, f"requeued by user with the failed ones: {said}")
            self._reopen(run, "jobs requeued")
        lines = [f"{len(got)} job{'s' if len(got) != 1 else ''} requeued"]
        return "done", "\n".join(lines + [f"  {job.id} {job.key}: {said}" for job, _, said in got])

    def _unfinished(self, run: RunRow, ids: tuple[int, ...]) -> tuple[list, str]:
        """(the jobs ``ids`` names, why they cannot all be requeued: "" when they can)."""
        if not ids:
            return [], "expected a list of job ids, got []"
        jobs = {job.id: job for job in self.store.jobs(run.id)}
        missing = [str(i) for i in ids if i not in jobs]
        if missing:
            return [], f"no job {', '.join(missing)} in run {run.id}"
        busy = [f"{jobs[i].key} is {jobs[i].state}" for i in ids if jobs[i].state not in JOB_UNFINISHED]
        if busy:
            return [], "only failed or cancelled jobs are requeued with the failed ones; " + ", ".join(busy)
        return [jobs[i] for i in dict.fromkeys(ids)], ""

    def _stuck(self, job) -> bool:
        """``running`` with no open attempt (left by a crashed engine): nothing runs, so it may be requeued."""
        return job.state is JobState.RUNNING and all(a.job_id != job.id for a in self.store.open_attempts(job.run_id))

    def _back_to_queue(self, run: RunRow, job, start: str | None, detail: str) -> None:
        argv = self._restart_as_asked(run, job, start)
        self.store.set_job_state(job.id, JobState.QUEUED, detail, ended=None, returncode=None, error=None, not_before=0,
                                 last_step=waiting_step(argv, job.job_dir), last_loss=None)

    def _reopen(self, run: RunRow, why: str) -> None:
        """An ended run whose jobs were requeued runs again."""
        if run.state in RUN_ENDED:
            self.store.set_run_state(run.id, RunState.RUNNING, why)

    def _restart_as_asked(self, run: RunRow, job, start: str | None) -> list[str]:
        """Give the new attempt its start flag (see engine/requeue.py), and drop a pause left on an
        ended run, which would otherwise keep the requeued job queued forever; the new argv."""
        argv = restart_argv(job.argv, job.state is JobState.SUCCEEDED, start)
        if argv != job.argv:
            self.store.set_job_argv(job.id, argv)
        if run.paused and run.state not in RUN_ACTIVE:
            self.store.set_paused(run.id, False)
        return argv
