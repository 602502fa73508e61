"""The plan form's fields beyond suites, pairs and devices (fuse, warm start, allow cpu, on_oom,
overrides) with the plan's own defaults and validation; and keys typed faster than the app
handles them landing in the field they were typed for."""

from __future__ import annotations

import pytest
from textual import events
from textual.widgets import Input, SelectionList, Static

from lat_core.front.service import open_store
from lat_tui import sweep_words
from lat_tui.screens.add_jobs import AddJobsScreen
from lat_tui.screens.dashboard import DashboardScreen
from lat_tui.screens.plan import PlanScreen

from .test_controls import on_dashboard
from .test_dashboard import make_run, wait_for
from .test_plan_screen import _fill, _problems_on_save

SIZES = [(80, 24), (160, 48)]
CHARACTERS = {"tab": "\t", "enter": "\r", "space": " ", "slash": "/"}


def saved_plans(state_dir) -> list:
    store = open_store(state_dir)
    try:
        return [run.plan for run in store.runs()]
    finally:
        store.close()


def type_fast(app, *keys: str) -> None:
    """Queue every key before the app handles the first, as a fast typist on a loaded machine does
    (Pilot.press waits for the app to go idle after each key, which hides the race)."""
    for key in keys:
        app.post_message(events.Key(key, CHARACTERS.get(key, key if len(key) == 1 else None)))


def value(app, wid: str) -> str:
    return app.screen.query_one(f"#{wid}", Input).value


async def on_the_form_with_every_suite(pilot) -> None:
    """Waits for the plan form, then picks every suite in it."""
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, PlanScreen))
    pilot.app.screen.query_one("#suites", SelectionList).select_all()


async def saved(pilot, **values) -> None:
    """Fills ``values`` in and presses ctrl+s; returns once the run is made (the dashboard is up)."""
    await _fill(pilot, **values)
    await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, DashboardScreen))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_keys_typed_fast_after_tab_or_enter_land_in_the_next_field(make_app, size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        app.screen.query_one("#rounds", Input).focus()
        await pilot.pause()
        type_fast(app, "1", "enter", *"7:tiny-sst2", "tab", "tab", "2", "shift+tab", "shift+tab")
        await wait_for(pilot, lambda: value(app, "slots") == "2" and app.focused.id == "pairs")
        await pilot.pause(0.2)
        assert (value(app, "rounds"), value(app, "pairs"), value(app, "slots")) == ("1", "7:tiny-sst2", "2")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_keys_typed_fast_after_tab_land_in_the_next_field_of_the_add_dialog(make_app, journal, tmp_path, size):
    run_id, _ = make_run(journal, tmp_path / "out")
    journal.set_run_state(run_id, "running")
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_dashboard(pilot, app)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, AddJobsScreen) and app.focused.id == "add-suites")
        type_fast(app, *"demo", "tab", "tab", *"3:tiny-sst2", "shift+tab")
        await wait_for(pilot, lambda: app.focused.id == "add-rounds")
        await pilot.pause(0.2)
        assert (value(app, "add-suites"), value(app, "add-rounds"), value(app, "add-pairs")) == (
            "demo", "all", "3:tiny-sst2")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_plans_options_go_into_the_run(make_app, state_dir, tmp_path, size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_the_form_with_every_suite(pilot)
        switches = app.screen.query_one("#switches", SelectionList)
        assert switches.selected == ["warm_start"]  # the plan's defaults: warm start on, allow cpu off
        assert value(app, "fuse") == "" and app.screen.query_one("#fuse", Input).placeholder == "auto"
        switches.deselect("warm_start")
        switches.select("allow_cpu")
        await saved(pilot, pairs="1:tiny-sst2", output=str(tmp_path / "o"), fuse="no",
                    **{"on-oom": "smaller_micro_batch expandable_segments max_retries=3",
                       "overrides": "train.lr=0.001 'peft.target_modules=[q_proj, v_proj]'"})
    (plan,) = saved_plans(state_dir)
    assert (plan.fuse, plan.warm_start, plan.allow_cpu) == (False, False, True)
    assert plan.on_oom.remedies == ("smaller_micro_batch", "expandable_segments") and plan.on_oom.max_retries == 3
    assert plan.overrides["train"]["lr"] == 0.001 and list(plan.overrides["peft"]["target_modules"]) == [
        "q_proj", "v_proj"]


async def test_an_untouched_form_keeps_the_plans_defaults_and_the_next_form_starts_from_the_last_plan(
        make_app, state_dir, tmp_path):
    app = make_app()
    async with app.run_test(size=SIZES[0]) as pilot:
        await on_the_form_with_every_suite(pilot)
        await saved(pilot, pairs="1:tiny-sst2", output=str(tmp_path / "o"))
        (plan,) = saved_plans(state_dir)
        assert (plan.fuse, plan.warm_start, plan.allow_cpu, plan.on_oom, dict(plan.overrides)) == (
            "auto", True, False, None, {})
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        await _fill(pilot, output=str(tmp_path / "o2"), fuse="yes",
                    **{"on-oom": "fewer_workers max_retries=4", "overrides": "train.max_steps=5"})
        app.screen.query_one("#switches", SelectionList).select("allow_cpu")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and len(saved_plans(state_dir)) == 2)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        assert (value(app, "fuse"), value(app, "on-oom"), value(app, "overrides")) == (
            "yes", "fewer_workers max_retries=4", "train.max_steps=5")
        assert app.screen.query_one("#switches", SelectionList).selected == ["warm_start", "allow_cpu"]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_bad_options_are_named_in_the_forms_words_and_start_nothing(make_app, state_dir, tmp_path, size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_the_form_with_every_suite(pilot)
        problems = await _problems_on_save(pilot, pairs="1:tiny-sst2", output=str(tmp_path / "o"), fuse="maybe",
                                           **{"on-oom": "bigger_gpu max_retries=0", "overrides": "lr train.lr=0.001"})
        assert "Fuse: " in problems and "'maybe'" in problems
        assert "On OOM: unknown remedy 'bigger_gpu'" in problems and "On OOM: must be 1 or more" in problems
        assert "Overrides: 'lr': expected FIELD=VALUE" in problems
        assert app.screen.query_one("#problems", Static).region.height > 0
    assert saved_plans(state_dir) == []


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_sweep_field_takes_the_sweep_flags_words_into_the_run_and_back_into_the_next_form(
        make_app, state_dir, tmp_path, size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_the_form_with_every_suite(pilot)
        words = "train.lr=1e-4,2e-4 zip:train.warmup_steps=0,10 random:peft.dropout=uniform:0,0.2 draws=2 seed=3"
        await saved(pilot, pairs="1:tiny-sst2", output=str(tmp_path / "o"), sweep=words)
        (plan,) = saved_plans(state_dir)
        assert sweep_words.plain(plan.sweep) == {"grid": {"train.lr": [1e-4, 2e-4]}, "zip": {"train.warmup_steps": [0, 10]},
                                    "random": {"n": 2, "seed": 3, "space": {"peft.dropout": {"uniform": [0, 0.2]}}}}
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        assert value(app, "sweep") == ("train.lr=1e-4,2e-4 zip:train.warmup_steps=0,10 "
                                       "random:peft.dropout=uniform:0,0.2 draws=2 seed=3")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_bad_sweep_is_named_in_the_forms_words_and_starts_nothing(make_app, state_dir, tmp_path, size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_the_form_with_every_suite(pilot)
        sweep = "train.lrr=1e-4,2e-4 peft.r random:train.lr=log_uniform:0,1e-3 draws=2"
        problems = await _problems_on_save(pilot, pairs="1:tiny-sst2", output=str(tmp_path / "o"), sweep=sweep)
        assert "Sweep: 'peft.r': expected FIELD=VALUE,VALUE,..." in problems
        assert "Sweep (train.lrr): unknown field 'train.lrr' (did you mean train.lr?)" in problems
        assert "Sweep (train.lr.log_uniform): a log-uniform range needs low > 0" in problems
    assert saved_plans(state_dir) == []
