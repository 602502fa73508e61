"""A paused run on the dashboard: the footer names what ``p`` does now, and the status line says
why admission is paused when the user did not pause it (the circuit breaker)."""

from __future__ import annotations

import pytest

from lat_core.contract.commands import PauseRun, ResumeRun
from lat_tui.widgets.status import RunStatus

from .test_controls import on_dashboard, sent
from .test_dashboard import make_run, text_of, wait_for
from .test_keys import footer_keys

SIZES = [(80, 24), (160, 48)]
BREAKER = ("breaker: the first 3 jobs all failed with hub_unreachable (latest: job 3 a 3:tiny-sst2: cannot reach "
           "the hub); fix the cause, then `lat-tui resume`, or `lat-tui cancel --all`")


def status_lines(app) -> list[str]:
    return text_of(app, RunStatus).splitlines()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_footer_says_resume_while_paused(make_app, journal, tmp_path, size):
    run_id, _ = make_run(journal, tmp_path / "out")
    journal.set_run_state(run_id, "running")
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_dashboard(pilot, app)
        await wait_for(pilot, lambda: "Pause" in footer_keys(app))
        assert "Resume" not in footer_keys(app)
        await pilot.press("p")
        journal.set_paused(run_id, True)  # the engine applies the pause
        await wait_for(pilot, lambda: "Resume" in footer_keys(app))
        assert "Pause" not in footer_keys(app)
        await pilot.press("p")
    assert sent(journal, run_id) == [PauseRun(), ResumeRun()]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_status_line_says_why_the_breaker_paused_the_run(make_app, journal, tmp_path, size):
    run_id, _ = make_run(journal, tmp_path / "out")
    journal.set_run_state(run_id, "running")
    journal.set_paused(run_id, True, BREAKER)
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_dashboard(pilot, app)
        status = app.screen.query_one(RunStatus)
        # the text first, then the layout's second row: a later refresh under load
        await wait_for(pilot, lambda: len(status_lines(app)) == 2 and status.region.height == 2)
        first, why = status_lines(app)
        assert "paused (p: resume)" in first
        assert why.startswith("why paused: breaker: the first 3 jobs all failed with hub_unreachable")
        shown = status.render_line(1).text.rstrip()
        assert shown.startswith("why paused: breaker:")  # on screen, and cut with a mark where it is
        assert shown.endswith("…") == (len(why) > status.content_region.width)
        journal.set_paused(run_id, False)
        # the line goes, then the layout gives its row back (a later refresh under load)
        await wait_for(pilot, lambda: len(status_lines(app)) == 1 and "paused" not in status_lines(app)[0])
        await wait_for(pilot, lambda: status.region.height == 1)


async def test_a_pause_the_user_asked_for_needs_no_reason_line(make_app, journal, tmp_path):
    run_id, _ = make_run(journal, tmp_path / "out")
    journal.set_run_state(run_id, "running")
    journal.set_paused(run_id, True)
    app = make_app()
    async with app.run_test(size=SIZES[0]) as pilot:
        await on_dashboard(pilot, app)
        await wait_for(pilot, lambda: "paused (p: resume)" in text_of(app, RunStatus))
        assert len(status_lines(app)) == 1
