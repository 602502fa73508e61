"""SVG snapshots of the main screens at 80x24 and 160x48 (pytest-textual-snapshot, as Posting does).

After a deliberate change to a screen, inspect the report and rewrite with ``--snapshot-update``.
The host probe is fixed here (the machine's RAM and CPU use change from run to run); everything
else is the real app reading a real journal.
"""

from __future__ import annotations

import time

import pytest

from lat_core.monitor.host import HostSnapshot
from lat_tui.screens.dashboard import DashboardScreen
from lat_tui.screens.plan import PlanScreen
from lat_tui.widgets.job_table import JobTable

from .test_controls import fail
from .test_dashboard import make_run, wait_for

SIZES = [(80, 24), (160, 48)]
GIB = 2**30


@pytest.fixture
def fixed_host(monkeypatch):
    monkeypatch.setattr("lat_tui.poll.host_snapshot",
                        lambda: HostSnapshot(64 * GIB, 20 * GIB, 44 * GIB, 0, 0, 1.5, 16))
    monkeypatch.setattr("lat_tui.poll.cpu_percent", lambda: (25.0, 75.0, 0.0, 100.0))


@pytest.fixture
def ended_run(journal, tmp_path, fixed_host):
    """A finished run: one failed job with a log, one succeeded."""
    run_id, (first, second) = make_run(journal, tmp_path / "out")
    (tmp_path / "out" / "tiny-sst2_seed1/a" / "job.yaml").write_text("model: {family: gla}\n")
    (tmp_path / "out" / "tiny-sst2_seed1/a" / "train.log").write_text(
        "".join(f"step {n}/40 loss {2 - n / 40:.4f}\n" for n in range(1, 41)) + "error: CUDA out of memory")
    fail(journal, first)
    now = time.time()
    journal.set_job_state(second, "succeeded", device="cpu", started=now - 61, ended=now, attempts=1, returncode=0)
    journal.set_run_state(run_id, "running")
    journal.set_run_state(run_id, "finished")
    return run_id


async def dashboard_ready(pilot) -> None:
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen)
                   and app.screen.query_one(JobTable).row_count == 2
                   and "CUDA out of memory" in " ".join(app.screen.query_one("#job-log").lines))
    await pilot.pause(0.3)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_dashboard(snap_compare, make_app, ended_run, size):
    assert snap_compare(make_app(gpus=2), terminal_size=size, run_before=dashboard_ready)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help_over_the_dashboard(snap_compare, make_app, ended_run, size):
    async def open_help(pilot):
        await dashboard_ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
    assert snap_compare(make_app(gpus=2), terminal_size=size, run_before=open_help)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_plan_form(snap_compare, make_app, fixed_host, size):
    async def plan_ready(pilot):
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, PlanScreen))
        await pilot.press("space")
        await pilot.pause(0.2)
    assert snap_compare(make_app(), terminal_size=size, run_before=plan_ready)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_dashboard_without_gpus(snap_compare, make_app, ended_run, size):
    assert snap_compare(make_app(), terminal_size=size, run_before=dashboard_ready)
