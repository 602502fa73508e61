"""The plan form's manners: glyph checkboxes, placeholders, every suite reachable, descriptions
wrapped at words, errors in the form's words, and the last run's values filled in."""

from __future__ import annotations

from textual.widgets import Input, SelectionList, Static

from lat_core.contract.saved_plan import SavedPlan
from lat_tui.plan_form import form_from_saved_plan, human_problem
from lat_tui.screens.dashboard import DashboardScreen
from lat_tui.screens.plan import PlanScreen

from .test_plan_screen import _fill, _problems_on_save, _wait_for

LONG = ("a rather long description of what this suite measures, so that it has to wrap at the word "
        "boundaries of a narrow screen instead of being cut in the middle of a word")


def add_suites(configs_dir, count: int) -> list[str]:
    names = [f"suite_{n}" for n in range(count)]
    for name in names:
        (configs_dir / "suites" / f"{name}.yaml").write_text(
            f"name: {name}\ndescription: {LONG}\nrounds: {{1: [a.yaml]}}\n")
    return names


def line_texts(widget) -> list[str]:
    return [widget.render_line(y).text for y in range(widget.size.height)]


async def test_checked_suites_differ_by_glyph_and_every_suite_shows(make_app, configs_dir):
    names = add_suites(configs_dir, 6)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        suites = app.screen.query_one("#suites", SelectionList)
        await pilot.press("space")
        await pilot.pause()
        lines = line_texts(suites)
        assert len(lines) == 7 and all(any(name in line for line in lines) for name in ["demo", *names])
        assert lines[0].startswith("▐✓▌ demo") and lines[1].startswith("▐ ▌ suite_0")
        await pilot.press("down")
        about = str(app.screen.query_one("#suite-about", Static).render())
        assert about.startswith("suite_0: a rather long description") and "7 suites" in about
        about_widget = app.screen.query_one("#suite-about")
        assert about_widget.size.height >= 2  # wrapped, not cut
        rendered = " ".join(line.strip() for line in line_texts(about_widget))
        assert "in the middle of a word" in rendered


async def test_defaults_are_placeholders_and_typing_replaces_nothing(make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        slots = app.screen.query_one("#slots", Input)
        assert slots.value == "" and slots.placeholder == "auto"
        assert app.screen.query_one("#rounds", Input).placeholder == "all"
        slots.focus()
        await pilot.press("ctrl+a", "2")
        assert slots.value == "2"


async def test_errors_name_the_field_in_plain_words(make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        text = await _problems_on_save(pilot, countdown="soon")
        assert "Suites: pick at least one suite" in text
        assert "Pairs: give at least one seed:dataset pair" in text
        assert "Countdown: must be a number of minutes (got 'soon')" in text
        assert "should" not in text and "validation" not in text


def test_pydantic_messages_become_the_forms_words():
    assert human_problem("field 'countdown_minutes': Input should be greater than or equal to 0 (got '-3')") \
        == "Countdown: must be 0 or more (got '-3')"
    assert human_problem("field 'pairs': List should have at least 1 item after validation, not 0 (got [])") \
        == "Pairs: give at least one seed:dataset pair, e.g. 1:tiny-sst2"
    assert human_problem("plan form: something else") == "plan form: something else"


async def test_the_next_plan_starts_from_the_last_runs_values(make_app, tmp_path):
    app = make_app()
    out = tmp_path / "out"
    async with app.run_test(size=(80, 24)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        await pilot.press("space")
        await _fill(pilot, pairs="1:tiny-sst2 2:tiny-sst2", slots="2", output=str(out),
                    env="NUM_DATA_WORKERS=0 HF_TOKEN=hf_secret")
        await pilot.press("ctrl+s")
        await _wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.press("n")
        await _wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        value = lambda wid: app.screen.query_one(f"#{wid}", Input).value  # noqa: E731
        assert value("pairs") == "1:tiny-sst2 2:tiny-sst2" and value("slots") == "2" and value("output") == str(out)
        assert value("env") == "NUM_DATA_WORKERS=0"  # the secret is masked in the journal: never shown
        assert app.screen.query_one("#suites", SelectionList).selected == ["demo"]
        assert app.screen.query_one("#devices", SelectionList).selected == ["cpu"]


def test_a_broken_saved_plan_fills_nothing():
    assert form_from_saved_plan(SavedPlan.from_text(": :\n  - [")).suites == []
    assert form_from_saved_plan(SavedPlan.from_text("gpus: [0, 1]\nslots: [2, 3]\n")).devices == [0, 1]
