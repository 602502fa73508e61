"""The Textual control center: the plan screen for a new run, the dashboard for a running one.

Closing the app stops nothing: the engine is a detached process that keeps draining the queue, and
the next ``lat-tui`` re-attaches to the latest run in the journal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from textual.app import App
from textual.binding import Binding

from lat_core.errors import LatError
from lat_core.front.client import RUN_ACTIVE, Client, GpuProbe, SuiteRegistry, ensure_engine, suite_registry
from lat_tui.context import AppContext
from lat_tui.screens.dashboard import DashboardScreen


class LatApp(App[int | None]):
    """Exits with the id of the run shown last (None when none was)."""

    CSS_PATH = "app.tcss"
    TITLE = "LAT control center"
    ENABLE_COMMAND_PALETTE = False  # the footer needs the room at 80 columns
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]  # app.tcss shrinks the monitor on short screens
    BINDINGS = [Binding("question_mark", "help", "Help", key_display="?")]

    def __init__(self, state_dir: Path, registry: SuiteRegistry, probe: GpuProbe,
                 engine_starter: Callable[..., object] = ensure_engine):
        super().__init__()
        self.context = AppContext(Path(state_dir), registry, probe, engine_starter)

    def on_mount(self) -> None:
        run_id = self._latest_run_id()
        if run_id is None:
            from lat_tui.screens.plan import PlanScreen  # the plan form loads the plan model: only when asked

            self.push_screen(PlanScreen(self.context), self._first_plan_done)
        else:
            self.show_run(run_id)

    def _latest_run_id(self) -> int | None:
        try:
            latest = self.context.client.current_run()
        except LatError as exc:
            self.notify(str(exc), title=exc.title, severity="error")
            return None
        return latest.id if latest else None

    def _first_plan_done(self, run_id: int | None) -> None:
        if run_id is None:
            self.exit(None)
        else:
            self.show_run(run_id, engine_just_started=True)

    def show_run(self, run_id: int, *, engine_just_started: bool = False) -> None:
        self.push_screen(DashboardScreen(self.context, run_id, engine_just_started=engine_just_started))

    def action_help(self) -> None:
        from lat_tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def action_quit(self) -> None:
        self.exit(self._shown_run_id())

    def _shown_run_id(self) -> int | None:
        screen = next((s for s in self.screen_stack if isinstance(s, DashboardScreen)), None)
        return screen.run_id if screen else None


def run_tui(state_dir: Path, configs_dir: Path | None = None) -> int:
    """Entry point for ``lat-tui`` without a plan; returns the process exit code."""
    app = LatApp(state_dir, suite_registry(configs_dir), GpuProbe())
    run_id = app.run()
    if app.return_code:
        return app.return_code
    if run_id is not None:
        print(farewell(state_dir, run_id))
    return 0


def farewell(state_dir: Path, run_id: int) -> str:
    """What to tell the shell on exit: the run goes on without us, or where its outputs are."""
    run = Client(state_dir).run(run_id)
    if run.state in RUN_ACTIVE:
        return f"lat-tui: run {run_id} goes on in the background engine; run lat-tui again to re-attach."
    return f"lat-tui: run {run_id} {run.state}; outputs in {run.output_root}"
