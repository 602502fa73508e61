"""How attempts end and get settled: reaping exits, judging them, and recovery of what a crash, a
lost journal tail or a fault in the engine's own handling of a job left half-way. A part of
:class:`lat_core.engine.loop.Engine`."""

from __future__ import annotations

import signal
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from lat_core.engine.breaker import Breaker
from lat_core.engine.closing import close_log
from lat_core.engine.faults import JOURNAL_ERRORS, EngineErrors, LostAttempt, find_lost_attempt
from lat_core.engine.groups import FusedGroups
from lat_core.engine.job_faults import JobFaults
from lat_core.engine.launch import Launched
from lat_core.engine.notices import RunNotices
from lat_core.engine.progress import Progress
from lat_core.engine.remedy import still_effective
from lat_core.engine.retries import maybe_retry
from lat_core.engine.state import EngineState
from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME
from lat_core.contract.jobdir import (AttemptFiles, ExitRecord, JobDir, PeakUsage, PidRecord, describe_exit,
                                      how_it_ended)
from lat_core.contract.rows import AttemptRow, JobRow, RunRow
from lat_core.contract.diagnosis import Diagnosis
from lat_core.contract.failure_classes import FailureClass
from lat_core.contract.states import HistoryKind, JobState
from lat_core.triage import classify
from lat_core.triage.hostoom import oom_kill_readings


VERDICTS = {JobState.CANCELLED: "cancelled by user"}  # else the state's own word (succeeded, failed)
SAVED_VERDICT = "stopped to resume"  # an attempt that saved at its time-limit warning (resubmitted, not failed)
LAUNCH_GRACE_S = 30.0
CANCEL_GRACE_S = 10.0


class Recovery:
    def __init__(self, state: EngineState, *, groups: FusedGroups, faults: JobFaults, errors: EngineErrors,
                 progress: Progress, notices: RunNotices, breaker: Breaker):
        self.store = state.store
        self._clock = state.clock
        self._state = state
        self._groups = groups
        self._faults = faults
        self._errors = errors
        self._progress = progress
        self._notices = notices
        self._breaker = breaker

    def reap(self, run: RunRow) -> None:
        self._groups.poll()
        for attempt in self.store.open_attempts(run.id):
            with self._errors.job_guard(attempt.job_id, "engine error reaping this job", self._faults.fail_job):
                self._reap_attempt(run, attempt)

    def _reap_attempt(self, run: RunRow, attempt: AttemptRow) -> None:
        popen = self._state.popens.get(attempt.id)
        # reap our own child so it does not linger as a zombie; while it runs it is alive, and is
        # the process launched (an unreaped pid is never reused): no /proc read needed to say so
        our_child_runs = popen is not None and popen.poll() is None and popen.pid == attempt.pid
        if attempt.pid is None:
            attempt = self._recover_pid(attempt, run.id)
        files = AttemptFiles(attempt.exit_path)
        record = files.read_exit()
        backend = self._state.backend(run.id)
        if record is not None and self._groups.group_ending(attempt, backend):
            return  # the last member of a fused group: settled once the group's process is gone
        if record is None and attempt.pid and not our_child_runs \
                and not backend.is_alive(attempt.pid, attempt.pid_start):
            record = files.read_exit() or self._groups.settle_member(attempt, backend)  # just written?
            if record is None and backend.reaps_process_tree:  # the slot frees once the job's tree is gone
                backend.stop_vanished(attempt.pid, attempt.pid_start, files.exit_path)
                record = files.read_exit()
            record = record or ExitRecord(None)
        if record is not None:
            self._record_exit(attempt, record.returncode, record.max_rss, record.problem)
        else:
            self._enforce_cancel_grace(run, attempt)

    def _recover_pid(self, attempt: AttemptRow, run_id: int) -> AttemptRow:
        """An engine that died between recording an attempt and its pid: the runner's own pid file
        (or, for a backend that ``recovers_from_queue`` such as Slurm, its queue) says whether the
        launch happened. Never relaunch: nothing found after a grace = failed."""
        backend = self._state.backend(run_id)
        runner = AttemptFiles(attempt.exit_path).runner()  # a fused member's runner is its group's
        started: Launched | PidRecord | None
        if backend.recovers_from_queue:  # the runner's pid file holds a pid on another host: useless here
            started = backend.recover(runner.exit_path, attempt.launched)  # a group's job: by the group's record
        else:
            started = runner.read_pid()
        if started:
            self.store.set_attempt_pid(attempt.id, started.pid, started.pid_start)
            return next(a for a in self.store.attempts(attempt.job_id) if a.id == attempt.id)
        if self._clock() - attempt.launched > LAUNCH_GRACE_S and AttemptFiles(attempt.exit_path).read_exit() is None:
            if attempt.cancel_at is not None:
                why, state, error = "cancelled; its launch never happened", JobState.CANCELLED, "cancelled by user"
            else:
                why, state = "launch interrupted by an engine crash", JobState.FAILED
                error = f"{why}; requeue it"
            self.store.finish_attempt(attempt.id, None, state, why, ended=self._clock(), error=error)
        return attempt

    def _enforce_cancel_grace(self, run: RunRow, attempt: AttemptRow) -> None:
        if attempt.cancel_at is not None and self._clock() >= attempt.cancel_at + CANCEL_GRACE_S and attempt.pid:
            if self._groups.may_kill(attempt):  # a fused group's process: once no member needs it
                self._state.backend(run.id).signal(attempt.pid, signal.SIGKILL)

    def _record_exit(self, attempt: AttemptRow, returncode: int | None, max_rss: int | None = None,
                     problem: str | None = None) -> None:
        self._state.forget_process(attempt.id)
        # A success needs no triage: its whole end (peaks, last progress, state, its config's peak)
        # is one commit. A failure's triage may ask a scheduler (sacct) and must not hold the
        # journal's write lock meanwhile: its writes commit one by one.
        with self.store.batch() if returncode == 0 else nullcontext():
            ended = self._end_attempt(attempt, returncode, max_rss, problem)
        if ended is None:
            return  # the job had already been settled (cancelled before start, ...): never overwritten
        job, state = ended
        if state is JobState.FAILED and job.returncode != EXIT_SAVED_TO_RESUME:  # that one saved to resume: no failure
            run = self.store.run(job.run_id)
            if job.diagnosis and job.diagnosis.cls is FailureClass.DISK_FULL:  # the trainer's own write failed
                self._faults.pause_for_full_disk(run)
            self._notices.job_failed(run, job)
            self._breaker.after_failure(run, job)

    def _end_attempt(self, attempt: AttemptRow, returncode: int | None, max_rss: int | None,
                     problem: str | None) -> tuple[JobRow, JobState] | None:
        """Record how the attempt ended: (the job, its new state), None where the job had already
        been settled."""
        group = AttemptFiles(attempt.exit_path).read_group_ref()  # a fused member's peaks are its group process's
        job = self.store.job(attempt.job_id)
        if max_rss and group is None:  # the kernel's peak for the trainer: jobs shorter than a sampling interval have one too
            job = self._record_peak_rss(job, max_rss)
        elif max_rss and job.fused_group:
            self.store.record_group_peak_rss(job.fused_group, max_rss)
        self._keep_peak_usage(job)
        if job.state is JobState.RUNNING:
            progress = self._progress.read(job)  # the steps it logged since the last tick: the table's final step and loss
            if progress is not None:
                job = replace(job, last_step=progress[0], last_loss=progress[1])
        state, error, diagnosis = self._judge(job, attempt, returncode, problem)
        # the end and the retry the plan asks for are one commit: an engine dying between them
        # would leave the job failed, its retry lost
        with self.store.batch():
            if not self.store.finish_attempt(attempt.id, returncode, state, end_detail(job, state, error), ended=self._clock(),
                                             error=error, diagnosis=diagnosis):
                return None
            ended = self.store.job(job.id)  # as failed, before a retry queues it again
            if state is JobState.FAILED and not self._groups.split_after_oom(attempt):
                maybe_retry(self.store, self.store.run(job.run_id), ended, now=self._clock())
        if state is JobState.PRUNED:
            self._keep_pruned(job, error or "")
        how = how_it_ended(returncode, diagnosis) + (f" ({problem})" if problem else "")
        verdict = SAVED_VERDICT if returncode == EXIT_SAVED_TO_RESUME else VERDICTS.get(state, state.value)
        self._close_log(job, verdict, error or how if state is JobState.PRUNED else how)  # pruned: the sweep's reason
        if state is JobState.SUCCEEDED and group is None:
            self._remember_peak(job)
        elif state is JobState.SUCCEEDED:  # a group's peak is recorded with its size, never as a job's alone
            self._groups.remember_peak(job)
        return ended, state

    def _close_log(self, job: JobRow, verdict: str, how: str) -> None:
        """The attempt's end as the last line of its train.log (a fused member's too: its own log),
        after the verdict, which quotes the log's last line, was taken from the trainer's."""
        close_log(job, verdict, how, self._clock(), self._progress.max_steps(job.id))

    def _record_peak_rss(self, job: JobRow, rss: int) -> JobRow:
        """The journal's peak RSS raised to ``rss`` (written only when that raises it: the sampled
        peak of the trainer's tree is often higher already); the row as the journal now has it.
        The engine is the only writer of peaks, so ``job`` (just read) is the journal's value."""
        peak = max(job.peak_rss or 0, rss)
        if peak == job.peak_rss:
            return job
        self.store.record_peak_rss(job.id, rss)
        return replace(job, peak_rss=peak)

    def _keep_peak_usage(self, job: JobRow) -> None:
        """The journal's peak memory of the job, into its folder for the results tables."""
        try:
            JobDir(job.job_dir).write_peak_usage(PeakUsage(job.peak_rss, job.peak_gpu))
        except OSError:  # a folder gone or read-only: the journal still has the number
            pass

    def _keep_pruned(self, job: JobRow, why: str) -> None:
        """Why the sweep stopped the job, into its folder for the results tables."""
        try:
            JobDir(job.job_dir).write_pruned(why)
        except OSError:  # a folder gone or read-only: the journal still says it
            pass

    def _remember_peak(self, job: JobRow) -> None:
        """What this config needed, for memory-aware admission of its next jobs."""
        event_peak = JobDir(job.job_dir).memory_event_peak()
        gpu = max(job.peak_gpu or 0, event_peak)
        if gpu or job.peak_rss:
            self.store.record_config_peak(job.profile_key, gpu, job.peak_rss or 0)

    def settle_orphans(self, run: RunRow) -> None:
        """Jobs ``running`` with no open attempt (an older engine died between two journal writes):
        settled from their last attempt's outcome, so no job stays stuck."""
        for job in self.store.running_without_attempt(run.id):
            with self._errors.job_guard(job.id, "engine error settling this job", self._faults.fail_job):
                attempts = self.store.attempts(job.id)
                self.store.add_transition(run.id, job.id, HistoryKind.RECOVERED, "running with no open attempt: settled from "
                                          + (f"attempt {attempts[-1].n}" if attempts else "nothing (no attempt)"))
                if not attempts:
                    self._faults.fail_job(job.id, "running without any attempt recorded (an engine crash); requeue it")
                    continue
                last = attempts[-1]
                record = AttemptFiles(last.exit_path).read_exit()
                returncode = last.returncode if last.returncode is not None else (record.returncode if record else None)
                self._record_exit(last, returncode)

    def lost_attempt(self, job: JobRow) -> LostAttempt | None:
        """What the job's folder holds of attempts newer than the journal knows (a lost tail)."""
        known = self.store.attempts(job.id)
        since = job.added or self.store.run(job.run_id).created
        if known:
            since = max(since, known[-1].ended or known[-1].launched)
        backend = self._state.backend(job.run_id)
        return find_lost_attempt(job, since, backend.is_alive if backend.samples_local_processes else None)

    def take_over(self, job: JobRow, device_id: str, lost: LostAttempt) -> None:
        detail = f"{lost.describe()} (the journal had lost it): not launched again"
        attempt_id, _ = self.store.start_attempt(job.id, device_id, str(lost.exit_path), started=self._clock(),
                                                 detail=detail)
        if lost.pid is not None:
            self.store.set_attempt_pid(attempt_id, lost.pid.pid, lost.pid.pid_start)
        if (ref := lost.attempt.read_group_ref()) is not None:  # its usage is its group's
            self.store.start_group(ref.group_id, job.run_id, device_id, len(ref.job_ids), [job.id])
        if not lost.alive:
            attempt = next(a for a in self.store.attempts(job.id) if a.id == attempt_id)
            self._record_exit(attempt, lost.returncode)

    def _judge(self, job: JobRow, attempt: AttemptRow, returncode: int | None, problem: str | None):
        """(state, error, diagnosis) of an ended attempt. Triage reads what the job left, so
        whatever goes wrong in it is part of this job's reason, never the engine's end."""
        if returncode == 0:
            return JobState.SUCCEEDED, None, None
        if attempt.stop_reason is not None:  # the sweep's halving stopped it
            return JobState.PRUNED, attempt.stop_reason, None
        if attempt.cancel_at is not None:
            return JobState.CANCELLED, "cancelled by user", None
        try:
            diagnosis = self._triage(job, attempt, returncode)
            error = describe_exit(returncode, Path(job.job_dir), diagnosis)
        except JOURNAL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - a triage bug fails this job with its reason
            error = f"{describe_exit(returncode, Path(job.job_dir))} (triage failed: {type(exc).__name__}: {exc})"
            diagnosis = None
        return JobState.FAILED, f"{error} ({problem})" if problem else error, diagnosis

    def _triage(self, job: JobRow, attempt: AttemptRow, returncode: int | None) -> Diagnosis:
        backend = self._state.job_backend(job)
        record = AttemptFiles(attempt.exit_path).read_exit()
        found = backend.diagnose(attempt.pid) if backend.diagnoses_failures and attempt.pid \
            and _ended_with_its_process(attempt, record) else None  # Slurm's verdict
        if found is None:
            before, after = oom_kill_readings(record.oom_kills if record else None, attempt.oom_source,
                                              attempt.oom_before)
            found = classify(Path(job.job_dir), returncode, cancelled=attempt.cancel_at is not None,
                             oom_kills_before=before, oom_kills_after=after,
                             env=job.env)  # the live env: remedies already applied count
        return still_effective(self.store.run(job.run_id), job, found)


def _ended_with_its_process(attempt: AttemptRow, record: ExitRecord | None) -> bool:
    """Whether the scheduler's word on the attempt's process (its Slurm job) is the attempt's: always
    for a job alone; for a fused member where the group's end was its end: it left on a signal to the
    group (SIGTERM from Slurm's time limit, scancel, preemption) or the group's process ended with it
    still in. A member that exited with an error of its own failed alone, whatever became of the
    group's job after it left (asking would also wait for a job that still runs for the others)."""
    if AttemptFiles(attempt.exit_path).read_group_ref() is None or record is None:
        return True
    return record.returncode is None or record.returncode < 0


def end_detail(job: JobRow, state: JobState, error: str | None) -> str:
    """The history's line for an attempt's end: its error, else ``exit 0`` and, where training
    stopped early (the trainer's finished event), how: ``exit 0; stopped early at step 6 of 40
    (no better accuracy for 2 evals)``."""
    if error or state is not JobState.SUCCEEDED:
        return error or "exit 0"
    stop = JobDir(job.job_dir).early_stop()
    return f"exit 0; {stop.line()}" if stop else "exit 0"
