"""The dashboard: run status, the monitor panel, the job table and the selected job's live log.

One poll at a time: a thread worker reads the journal, the GPUs and the log tail, posts the result,
and the handler re-arms the timer only after it has updated the widgets.
"""

from __future__ import annotations

from typing import Callable

from textual import on, work
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer

from lat_core.errors import LatError
from lat_core.front.client import JOB_FINAL, RUN_ACTIVE, job_log_path, plan_env_of
from lat_core.contract.rows import JobSummary, RunRow
from lat_tui.context import AppContext
from lat_tui.poll import DashboardData, GpuHistory, read_dashboard
from lat_tui.screens.controls import RunControls
from lat_tui.tail import TailState
from lat_tui.widgets.job_detail import JobDetail
from lat_tui.widgets.job_table import JobTable
from lat_tui.widgets.log_pane import FollowingLog, LogPane
from lat_tui.widgets.monitor import MonitorPanel, slots_text
from lat_tui.widgets.quiet import set_content
from lat_tui.widgets.status import RunStatus

POLL_SECONDS = 1.0
LOG_MAX_LINES = 2000
SLOTS = Binding.Group("Slots", compact=True)
REQUEUE = Binding.Group("Requeue", compact=True)  # r: the selected job, F: every failed one


class Polled(Message):
    def __init__(self, data: DashboardData):
        super().__init__()
        self.data = data


class PollFailed(Message):
    def __init__(self, run_id: int, text: str):
        super().__init__()
        self.run_id = run_id
        self.text = text


class DashboardScreen(RunControls, Screen):
    """The run: its jobs, devices and the selected job's log."""

    HELP_TITLE = "The run: jobs, devices and the selected job's log"

    # The footer shows the keys that apply to the run and the selected job now (check_action hides
    # the rest) and fits 80 columns with ``q Quit``; ``?`` lists every key, the unshown ones too.
    BINDINGS = [
        Binding("s", "skip_countdown", "Start now"),
        Binding("x", "extend_countdown", "+5min"),
        Binding("enter", "details", "Details", show=False),
        # one key, two bindings: the footer names what p does now (check_action keeps one of them)
        Binding("p", "pause", "Pause", tooltip="Pause admission (running jobs go on)"),
        Binding("p", "resume", "Resume", tooltip="Resume admission of a paused run"),
        Binding("c", "cancel_job", "Cancel", tooltip="Cancel the selected job (a running one: press twice)"),
        Binding("C", "cancel_run", "Cancel run", key_display="C", show=False,
                tooltip="Cancel the whole run (press twice)"),
        Binding("r", "requeue", "Requeue", group=REQUEUE, tooltip="Requeue the selected ended job (offers resume)"),
        Binding("F", "requeue_failed", "Requeue failed", key_display="F", group=REQUEUE,
                tooltip="Requeue every failed and cancelled job of the run (asks first)"),
        Binding("plus,equals_sign", "slots(1)", "Slots", key_display="+", group=SLOTS,
                tooltip="One more slot on the selected job's device"),
        Binding("minus", "slots(-1)", "Slots", key_display="-", group=SLOTS,
                tooltip="One slot less on the selected job's device"),
        Binding("a", "add_jobs", "Add", show=False, tooltip="Add jobs to this run"),
        Binding("t", "triage", "Triage", show=False, tooltip="Failed jobs, their diagnosis and remedies"),
        Binding("R", "results", "Results", key_display="R"),
        Binding("ctrl+r", "runs", "Runs", show=False, tooltip="Pick another run to view"),
        Binding("m", "toggle_monitor", "Monitor", show=False, tooltip="Show or hide the monitor panel"),
        Binding("n", "new_run", "New", show=False, tooltip="Plan a new run"),
        Binding("e", "start_engine", "Engine", show=False, tooltip="Start an engine if none runs"),
        # a priority key, so the search field has the keys typed right behind it (lat_tui.widgets.log_pane)
        Binding("slash", "search_log", "Search", key_display="/", priority=True,
                tooltip="Search the log (n/N: next/previous)"),
        Binding("tab", "app.focus_next", "Focus", show=False,
                tooltip="Move the keys between the job table and the log (shift+tab: back)"),
        Binding("escape", "focus_jobs", "Jobs", key_display="esc", show=False,
                tooltip="Back to the job table: the arrows move the selection again (closes the search)"),
        Binding("q", "app.quit", "Quit", tooltip="Leave (the run goes on in the background engine)"),
    ]

    def __init__(self, context: AppContext, run_id: int, *, engine_just_started: bool = False):
        super().__init__()
        self.context = context
        self.run_id = run_id
        self._reset_run_state()
        self._engine_checked = engine_just_started

    def _reset_run_state(self) -> None:
        self._run: RunRow | None = None
        self._jobs: dict[int, JobSummary] = {}
        self.job_families: dict[int, str] = {}
        self._selected: int | None = None
        self._tail = TailState()
        self._engine_checked = False
        self.engine_alive = True
        self.gpu_history = GpuHistory()
        self._init_controls()
        self._polling = False
        self._poll_again = False
        self._timer: Timer | None = None
        self._key_facts: tuple = ()
        self.poll_listeners: list[Callable[[], None]] = getattr(self, "poll_listeners", [])  # open views

    def compose(self) -> ComposeResult:
        yield RunStatus(id="run-status")
        yield MonitorPanel(id="monitor")
        yield JobTable(id="jobs")
        yield JobDetail(id="job-detail")
        yield LogPane(LOG_MAX_LINES, id="log-pane")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(JobTable).focus()
        self.query_one(FollowingLog).border_title = "log"
        self.poll_now()

    # ------------------------------------------------------------------ polling
    def poll_now(self) -> None:
        """Poll at once, or right after the poll in flight."""
        if self._polling:
            self._poll_again = True
            return
        if self._timer is not None:
            self._timer.stop()
        self._polling = True
        self._poll(self.run_id, self._tail, tuple(self.pending_commands))

    @work(thread=True, group="dashboard-poll")
    def _poll(self, run_id: int, tail: TailState, command_ids: tuple[int, ...]) -> None:
        try:
            data = read_dashboard(self.context.client, run_id, self.context.probe, tail, command_ids)
        except (LatError, OSError) as exc:
            self.post_message(PollFailed(run_id, str(exc)))
        else:
            self.post_message(Polled(data))

    @on(Polled)
    def _polled(self, message: Polled) -> None:
        data = message.data
        if data.run.id == self.run_id:
            self._show(data)
        self._rearm()

    @on(PollFailed)
    def _poll_failed(self, message: PollFailed) -> None:
        if message.run_id == self.run_id:
            set_content(self.query_one(RunStatus), f"[b]cannot read the journal:[/b] {message.text}")
        self._rearm()

    def _rearm(self) -> None:
        self._polling = False
        if self._poll_again:
            self._poll_again = False
            self.call_later(self.poll_now)
        else:
            self._timer = self.set_timer(POLL_SECONDS, self.poll_now)

    def _show(self, data: DashboardData) -> None:
        self._run = data.run
        self._jobs = {job.id: job for job in data.jobs}
        self.job_families = data.families
        self.engine_alive = data.engine_alive
        self.query_one(RunStatus).show(data.run, data.jobs, data.engine_alive, data.pause_reason)
        self.gpu_history.add(data.gpus)
        self.query_one(MonitorPanel).show(data.gpus, data.host, self.gpu_history, slots_text(data.run.devices),
                                          data.cpu_percent)
        for command in data.commands.values():
            if command.answered and command.id in self.pending_commands:
                self.command_answered(command)
        table = self.query_one(JobTable)
        table.show_jobs(data.jobs, data.families, data.groups)
        if self._selected is None and table.row_count:
            self._select(table.selected_job_id())
        self._show_detail()
        self._refresh_keys_if_changed()
        if data.tail.generation == self._tail.generation and data.log_lines:
            self.query_one(FollowingLog).append(data.log_lines)
        if data.tail.generation == self._tail.generation:
            self._tail = data.tail
        self._check_engine_once(data)
        for listener in list(self.poll_listeners):
            listener()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Keys that cannot act on the run or the selected job as they are now are hidden."""
        state = self._run.state if self._run else None
        job = self.selected_job()
        if action in ("skip_countdown", "extend_countdown"):
            return state == "countdown"
        if action in ("pause", "resume"):
            paused = bool(self._run and self._run.paused)
            return state in RUN_ACTIVE and state != "countdown" and paused == (action == "resume")
        if action == "cancel_run":
            return state in RUN_ACTIVE or None
        if action == "cancel_job":
            return state in RUN_ACTIVE and job is not None and job.state not in JOB_FINAL
        if action == "requeue":
            return job is not None and job.state in JOB_FINAL
        if action == "requeue_failed":
            return bool(self.unfinished_jobs())
        if action == "slots":
            return state in RUN_ACTIVE and bool(self._run.devices)
        if action in ("results", "search_log"):
            return state != "countdown"  # the countdown's keys need the room
        return True

    def _refresh_keys_if_changed(self) -> None:
        job = self.selected_job()
        facts = (self._run.state if self._run else None, self._run.paused if self._run else None,
                 job.state if job else None, bool(self.unfinished_jobs()))
        if facts != self._key_facts:
            self._key_facts = facts
            self.refresh_bindings()

    def _check_engine_once(self, data: DashboardData) -> None:
        """On re-attach, an active run whose engine died gets a new one (it adopts running jobs)."""
        if self._engine_checked:
            return
        self._engine_checked = True
        if data.run.state in RUN_ACTIVE and not data.engine_alive:
            self.action_start_engine()

    # ------------------------------------------------------------------ selection
    @on(DataTable.RowHighlighted, "#jobs")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._select(self.query_one(JobTable).job_id_at(event.row_key.value))

    def _select(self, job_id: int | None) -> None:
        if job_id is None or job_id == self._selected:
            return
        self._selected = job_id
        job = self._jobs.get(job_id)
        log = self.query_one(FollowingLog)
        log.reset()
        log.border_title = f"log · {self.name_of(job)}" if job else "log"
        path = job_log_path(job.job_dir) if job else None
        self._tail = TailState(path=path, generation=self._tail.generation + 1)
        self._show_detail()
        self._refresh_keys_if_changed()
        self.poll_now()

    def _show_detail(self) -> None:
        job = self.selected_job()
        self.query_one(JobDetail).show(job, self.name_of(job) if job else "", self.query_one(JobTable).names,
                                       self._whole_name)

    def _whole_name(self, job_id: int) -> str | None:
        job = self._jobs.get(job_id)
        return self.name_of(job) if job else None

    def load_run(self, run_id: int) -> None:
        """Show another run (a new one from the plan screen)."""
        if self._timer is not None:
            self._timer.stop()
        polling = self._polling
        self.run_id = run_id
        self._reset_run_state()
        self._engine_checked = True  # the plan screen has just made sure of the engine
        self._polling = polling
        self.gpu_history = GpuHistory()
        self.query_one(JobTable).clear_jobs()
        log = self.query_one(FollowingLog)
        log.reset()
        log.border_title = "log"
        self.poll_now()

    def action_start_engine(self) -> None:
        env = plan_env_of(self._run) if self._run else {}
        try:
            started = self.context.engine_starter(self.context.state_dir, extra_env=env)
        except LatError as exc:  # a journal or disk fault: say why, never retry in a loop
            self.notify(str(exc), title=exc.title, severity="error")
            return
        self.notify("Engine started." if started else "An engine is already running.")

    def action_new_run(self) -> None:
        from lat_tui.screens.plan import PlanScreen  # the plan model's imports cost the first frame ~0.4 s

        self.app.push_screen(PlanScreen(self.context, can_go_back=True), self._plan_done)

    def _plan_done(self, run_id: int | None) -> None:
        if run_id is not None:
            self.load_run(run_id)

    # ------------------------------------------------------------------ other views
    @on(DataTable.RowSelected, "#jobs")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self._select(self.query_one(JobTable).job_id_at(event.row_key.value))
        self.action_details()

    def action_details(self) -> None:
        from lat_tui.screens.job_screen import JobScreen  # views opened on demand load on demand

        job = self.selected_job()
        if job is not None:
            self.app.push_screen(JobScreen(self.context, job.id, self))

    def action_triage(self) -> None:
        from lat_tui.screens.triage import TriageScreen

        self.app.push_screen(TriageScreen(self.context, self.run_id, self))

    def action_results(self) -> None:
        """The run's results, aggregated from its output tree and refreshed as evaluations land."""
        if self._run is not None:
            from pathlib import Path

            from lat_tui.screens.results import ResultsScreen

            self.app.push_screen(ResultsScreen(Path(self._run.output_root), client=self.context.client))

    def action_add_jobs(self) -> None:
        from lat_tui.screens.add_jobs import AddJobsScreen

        if self._run is not None:
            self.app.push_screen(AddJobsScreen(self.context, self._run), self._jobs_made)

    def _jobs_made(self, jobs: list[dict] | None) -> None:
        if jobs:
            self.add_jobs(jobs)

    def action_runs(self) -> None:
        from lat_tui.screens.runs import RunPicker

        self.app.push_screen(RunPicker(self.context.client, self.run_id), self._run_picked)

    def _run_picked(self, run_id: int | None) -> None:
        if run_id is not None and run_id != self.run_id:
            self.load_run(run_id)

    def action_search_log(self) -> None:
        pane = self.query_one(LogPane)
        if self.focused is pane.search_field:
            raise SkipAction()  # a "/" in the search text
        pane.open_search()

    def action_focus_jobs(self) -> None:
        self.query_one(LogPane).close_search()
        self.query_one(JobTable).focus()

    def action_toggle_monitor(self) -> None:
        monitor = self.query_one(MonitorPanel)
        monitor.display = not monitor.display
