"""The plan form at 80x24: bad input shows every problem and starts nothing; good input starts a run."""

from __future__ import annotations

import time

from textual.widgets import Input, SelectionList, Static

from lat_core.front.service import open_store
from lat_tui.screens.dashboard import DashboardScreen
from lat_tui.screens.plan import PlanScreen
from tests.helpers.waits import HANG_S

SIZE = (80, 24)


async def _fill(pilot, **values) -> None:
    for wid, text in values.items():
        pilot.app.screen.query_one(f"#{wid}", Input).value = text
    await pilot.pause()


def _problems(app) -> str:
    return str(app.screen.query_one("#problems", Static).render())


def _runs(state_dir) -> list:
    store = open_store(state_dir)
    try:
        return store.runs()
    finally:
        store.close()


async def _wait_for(pilot, predicate, timeout: float = HANG_S) -> None:
    deadline = time.monotonic() + timeout  # only a hang: a loaded host draws late
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.1)
    raise AssertionError("condition not met in time")


async def _problems_on_save(pilot, **values) -> str:
    """Fills ``values`` in, presses ctrl+s and waits until the form shows its problems: their text."""
    await _fill(pilot, **values)
    await pilot.press("ctrl+s")
    await _wait_for(pilot, lambda: "Invalid plan" in _problems(pilot.app))
    return _problems(pilot.app)


async def _submit_a_bad_plan(pilot) -> str:
    """No suite, a pair without a seed, a dataset that does not exist, slots not a number: ctrl+s,
    until the form shows its problems."""
    await pilot.pause()
    return await _problems_on_save(pilot, pairs="x:tiny-sst2 1:no-such-data", slots="two")


async def test_no_run_opens_plan_screen_with_suites_and_cpu(make_app):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, PlanScreen)
        suites = app.screen.query_one("#suites", SelectionList)
        assert [suites.get_option_at_index(i).value for i in range(suites.option_count)] == ["demo"]
        devices = app.screen.query_one("#devices", SelectionList)
        assert devices.selected == ["cpu"]
        assert "driver not loaded" in str(app.screen.query_one(".hint", Static).render()) or any(
            "driver not loaded" in str(w.render()) for w in app.screen.query(".hint"))


async def test_gpus_listed_with_memory(make_app):
    app = make_app(gpus=2)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        devices = app.screen.query_one("#devices", SelectionList)
        labels = [str(devices.get_option_at_index(i).prompt) for i in range(devices.option_count)]
        assert labels[0].startswith("GPU 0 NVIDIA H100") and "0.0/80G" in labels[0]
        assert devices.selected == []


async def test_bad_input_shows_every_problem_and_creates_no_run(make_app, state_dir, engine_spy):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        text = await _submit_a_bad_plan(pilot)
        assert "Suites: pick at least one suite" in text
        assert "seed:dataset" in text
        assert "slot" in text
        assert isinstance(app.screen, PlanScreen)
        box = app.screen.query_one("#problems")  # scrolled into view at 80x24 (once the scroll animates)
        await _wait_for(pilot, lambda: 0 <= box.region.y and box.region.bottom <= SIZE[1])
    assert _runs(state_dir) == []
    assert engine_spy.calls == []


async def test_unknown_dataset_and_missing_round_are_named(make_app, state_dir):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")  # select the highlighted suite
        text = await _problems_on_save(pilot, rounds="1 7", pairs="1:no-such-data")
        assert "has no round 7" in text
        assert "unknown dataset 'no-such-data'" in text
    assert _runs(state_dir) == []


async def test_gpu_plan_on_missing_gpu_is_rejected(make_app, state_dir):
    app = make_app(gpus=1)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        await _fill(pilot, pairs="1:tiny-sst2")
        await pilot.press("ctrl+s")
        await _wait_for(pilot, lambda: "Devices:" in _problems(app))
    assert _runs(state_dir) == []


async def test_good_input_creates_run_starts_engine_and_opens_dashboard(make_app, state_dir, tmp_path, engine_spy):
    app = make_app()
    out = tmp_path / "out"
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        await _fill(pilot, pairs="1:tiny-sst2 2:tiny-sst2", slots="2", output=str(out), env="NUM_DATA_WORKERS=0")
        await pilot.press("ctrl+s")
        await _wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await _wait_for(pilot, lambda: app.screen.query_one("#jobs").row_count == 2)
    runs = _runs(state_dir)
    assert len(runs) == 1 and runs[0].devices[0].slots == 2
    assert (out / "tiny-sst2_seed1" / "a" / "job.yaml").is_file()
    assert engine_spy.calls == [(state_dir, {"NUM_DATA_WORKERS": "0"})]


async def test_keyboard_only_fill(make_app, state_dir, tmp_path):
    """Tab order: suites, rounds, pairs, devices, slots, countdown, output, env, fuse, options, on OOM,
    overrides, sweep, start; enter in a text field goes to the next one (in the options list it toggles)."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "tab", "tab", *"1:tiny-sst2", "tab", "tab", "tab", "tab")
        await pilot.press(*str(tmp_path / "o"), "enter", "enter", "enter", "tab", "enter", "enter", "enter", "enter")
        await _wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
    assert len(_runs(state_dir)) == 1


async def test_escape_returns_to_dashboard_without_a_new_run(make_app, state_dir, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        await _fill(pilot, pairs="1:tiny-sst2", output=str(tmp_path / "o"))
        await pilot.press("ctrl+s")
        await _wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.press("n")
        await _wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        await pilot.press("escape")
        await _wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
    assert len(_runs(state_dir)) == 1


async def test_problems_scroll_into_view_once_laid_out_at_their_height(make_app, monkeypatch):
    """On a busy machine the scroll asked for after the update can run before the new text's layout
    (CI saw only the box's first line on screen): the box scrolls itself when its height settles."""
    monkeypatch.setattr(PlanScreen, "call_after_refresh", lambda self, *a, **k: True)   # that scroll lost
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _submit_a_bad_plan(pilot)
        box = app.screen.query_one("#problems")
        await _wait_for(pilot, lambda: box.region.height > 3 and 0 <= box.region.y and box.region.bottom <= SIZE[1])
