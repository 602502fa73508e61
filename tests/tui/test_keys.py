"""One Pilot test per new key: help, run picker, live job view, resume offer; and the footer."""

from __future__ import annotations

import time

from textual.widgets import Footer, OptionList

from lat_core.contract.commands import RequeueJob
from lat_tui.screens.dashboard import DashboardScreen
from lat_tui.screens.help import HelpScreen, help_sections
from lat_tui.screens.job_screen import JobScreen
from lat_tui.screens.resume_offer import ResumeOffer
from lat_tui.screens.runs import RunPicker

from .test_controls import fail, on_dashboard, sent
from .test_dashboard import SIZE, make_run, wait_for


def footer_keys(app) -> dict[str, object]:
    """Footer entries by description (a compact group's by its label), with their screen regions."""
    footer = app.screen.query_one(Footer)
    labels = {str(label.render()).strip(): label.region for label in footer.query("FooterLabel")}
    return {**labels, **{key.description: key.region for key in footer.query("FooterKey") if key.description}}


def footer_key_names(app) -> list[str]:
    return [key.key for key in app.screen.query_one(Footer).query("FooterKey")]


def help_text(app) -> str:
    return str(app.screen.query_one("#help-keys").render())


async def test_question_mark_lists_every_key_of_the_screen_below(make_app, journal, tmp_path):
    make_run(journal, tmp_path / "out")
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await on_dashboard(pilot, app)
        dashboard = app.screen
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        described = {b.description for _, bindings in help_sections(dashboard) for b in bindings}
        declared = {b.description for b in DashboardScreen.BINDINGS}
        assert declared <= described
        assert "Next match" in described and "Help" in described  # the log's keys and the app's
        assert "Cancel the whole run (press twice)" in help_text(app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, DashboardScreen)


def quit_laid_out(app) -> bool:
    region = footer_keys(app).get("Quit")
    return region is not None and region.width > 0


async def test_footer_shows_the_keys_that_apply_and_quit_fits_80_columns(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out", countdown=600)
    fail(journal, first)
    app = make_app(gpus=8)
    async with app.run_test(size=SIZE) as pilot:
        await on_dashboard(pilot, app)
        # the footer follows the selected job once the first poll has filled the table, and lays out after
        await wait_for(pilot, lambda: {"Start now", "+5min", "Requeue"} <= set(footer_keys(app)) and quit_laid_out(app))
        keys = footer_keys(app)
        assert {"Start now", "+5min", "Requeue", "Quit"} <= set(keys) and "Cancel" not in keys  # a failed job
        assert keys["Quit"].right <= 80 and keys["Quit"].width > 0
        journal.set_run_state(run_id, "running")
        await pilot.press("down")  # the queued job: cancel applies, requeue does not
        await wait_for(pilot, lambda: "Pause" in footer_keys(app) and "Cancel" in footer_keys(app)
                       and quit_laid_out(app))
        keys = footer_keys(app)
        assert "r" not in footer_key_names(app) and "Start now" not in keys
        assert keys["Quit"].right <= 80 and keys["Quit"].width > 0 and "Help" in keys


async def test_ctrl_r_picks_another_run(make_app, journal, tmp_path):
    old_run, _ = make_run(journal, tmp_path / "old")
    journal.set_run_state(old_run, "finished")
    new_run, _ = make_run(journal, tmp_path / "new", keys=("tiny-sst2_seed1/a",))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await on_dashboard(pilot, app, rows=1)
        assert app.screen.run_id == new_run
        await pilot.press("ctrl+r")
        assert isinstance(app.screen, RunPicker)
        options = app.screen.query_one(OptionList)
        assert options.option_count == 2 and options.highlighted == 0  # newest first, the shown one lit
        await pilot.press("down", "enter")
        await on_dashboard(pilot, app, rows=2)
        assert app.screen.run_id == old_run
        await pilot.press("ctrl+r", "escape")
        assert isinstance(app.screen, DashboardScreen) and app.screen.run_id == old_run


async def test_job_view_follows_the_journal_without_a_key(make_app, journal, tmp_path):
    run_id, (first, _) = make_run(journal, tmp_path / "out")
    journal.set_run_state(run_id, "running")
    journal.set_job_state(first, "running", device="cpu", started=time.time() - 6, attempts=1)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await on_dashboard(pilot, app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobScreen)
                       and "running" in str(app.screen.query_one("#job-text").render()))
        journal.set_job_state(first, "succeeded", ended=time.time(), returncode=0)
        await wait_for(pilot, lambda: str(app.screen.query_one("#job-text").render()).startswith("succeeded"))
        await pilot.press("escape")
        assert app.screen.poll_listeners == []


async def test_requeue_of_a_failed_job_with_checkpoints_offers_resume(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out")
    journal.set_run_state(run_id, "running")
    fail(journal, first)
    fail(journal, second)
    checkpoint = tmp_path / "out" / "tiny-sst2_seed1/a" / "checkpoint-40"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "adapter_model.safetensors").write_bytes(b"weights")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await on_dashboard(pilot, app)
        await pilot.press("r")
        assert isinstance(app.screen, ResumeOffer)
        offer = str(app.screen.query_one("Static").render())
        assert "checkpoint-40 (step 40)" in offer and offer.startswith("Requeue a 1:tiny-sst2")  # the table's name
        await pilot.press("escape")  # nothing sent
        assert sent(journal, run_id) == []
        await pilot.press("r", "r")  # resume
        await pilot.press("down", "r")  # the second job has no checkpoint: no offer
        await pilot.press("up", "r", "f")
    assert sent(journal, run_id) == [RequeueJob(first, start="resume"), RequeueJob(second),
                                     RequeueJob(first, start="fresh")]


def screen_classes() -> list[type]:
    """Every screen the project defines (each module of lat_tui.screens, imported)."""
    import importlib
    import pkgutil

    import lat_tui.screens
    from textual.screen import Screen

    found = []
    for module_info in pkgutil.iter_modules(lat_tui.screens.__path__):
        module = importlib.import_module(f"lat_tui.screens.{module_info.name}")
        found += [cls for cls in vars(module).values()
                  if isinstance(cls, type) and issubclass(cls, Screen) and cls.__module__ == module.__name__]
    return found


def test_every_screen_has_a_help_title_of_its_own():
    classes = screen_classes()
    assert {"DashboardScreen", "PlanScreen", "HelpScreen"} <= {cls.__name__ for cls in classes}
    for cls in classes:
        title = vars(cls).get("HELP_TITLE")
        assert title and cls.__name__ not in title, cls
        doc = (cls.__doc__ or "").strip().splitlines()
        assert not doc or title != doc[0].rstrip("."), cls  # written for the user, not the docstring


async def test_help_is_headed_by_the_screens_title(make_app, journal, tmp_path):
    make_run(journal, tmp_path / "out")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await on_dashboard(pilot, app)
        await pilot.press("question_mark")
        text = help_text(app)
        assert text.startswith(DashboardScreen.HELP_TITLE + "\n")
        assert "in the log pane\n" in text  # a widget's keys under its user-facing title too
        assert "DashboardScreen" not in text and "FollowingLog" not in text
