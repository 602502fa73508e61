"""The dashboard's log pane: reaches the end, follows unless scrolled up, searches."""

from __future__ import annotations

from lat_tui.widgets.job_table import JobTable
from lat_tui.widgets.log_pane import FollowingLog, LogPane
from tests.tui.test_dashboard import log_lines, make_run, wait_for

KEYS = tuple(f"tiny-sst2_seed{n}/a" for n in range(1, 13))


def last_visible_line(log: FollowingLog) -> int:
    return int(log.scroll_y) + log.scrollable_content_region.height - 1


def log_fits_on_screen(app) -> bool:
    """The pane ends above the footer: nothing of it lies off screen."""
    pane = app.screen.query_one(LogPane)
    footer_top = app.screen.query_one("Footer").region.y
    return pane.region.height > 0 and pane.region.bottom <= footer_top


async def finished_job_app(make_app, journal, tmp_path, lines: int, size):
    run_id, jobs = make_run(journal, tmp_path / "out", keys=KEYS)
    journal.set_run_state(run_id, "finished")
    journal.set_job_state(jobs[0], "failed", returncode=1, error="Traceback ... RuntimeError: boom (exit 1)")
    body = "".join(f"line {n}\n" for n in range(1, lines)) + "error: RuntimeError: boom"  # no final newline
    (tmp_path / "out" / KEYS[0] / "train.log").write_text(body)
    return make_app()


async def test_a_finished_jobs_log_shows_its_last_line_without_newline(make_app, journal, tmp_path):
    for size in ((80, 24), (160, 48)):
        app = await finished_job_app(make_app, journal, tmp_path / str(size[0]), 465, size)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: log_lines(app)[-1:] == ["error: RuntimeError: boom"])
            await pilot.pause(0.2)
            log = app.screen.query_one(FollowingLog)
            assert log_fits_on_screen(app)
            assert last_visible_line(log) == log.line_count - 1


async def test_the_log_follows_after_a_resize_and_stops_when_scrolled_up(make_app, journal, tmp_path):
    app = await finished_job_app(make_app, journal, tmp_path, 465, (160, 48))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(log_lines(app)) == 465)
        log = app.screen.query_one(FollowingLog)
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.3)
        assert log_fits_on_screen(app)
        assert last_visible_line(log) == log.line_count - 1
        log.focus()
        await pilot.press("pageup")
        assert not log.following
        log.append(["one more"])
        await pilot.pause(0.1)
        assert last_visible_line(log) < log.line_count - 1  # the user's place is kept
        await pilot.press("end")
        assert log.following and last_visible_line(log) == log.line_count - 1


async def test_slash_searches_and_n_walks_the_matches(make_app, journal, tmp_path):
    app = await finished_job_app(make_app, journal, tmp_path, 300, (80, 24))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(log_lines(app)) == 300)
        log = app.screen.query_one(FollowingLog)
        await pilot.press("slash")
        assert app.focused.id == "log-search"
        await pilot.press(*"line 10", "enter")  # matches line 10 and lines 100-109
        assert app.focused is log and not log.following
        assert log.search("line 10") == 108  # the newest match first (index of "line 109")
        await pilot.press("N")
        assert log._match_line == 107
        await pilot.press("n", "n")
        assert log._match_line == 9  # wrapped around to "line 10"
        strip = log.render_line(log._match_line - int(log.scroll_y))
        assert any("yellow" in str(segment.style) for segment in strip if "line 10" in segment.text)
        await pilot.press("slash", "escape")  # escape closes the search and gives the keys to the table
        assert app.focused is app.screen.query_one(JobTable) and not app.screen.query_one("#log-search").display


async def test_after_a_search_escape_gives_the_arrows_back_to_the_table(make_app, journal, tmp_path):
    """Enter leaves the keys with the log (n/N walk the matches, arrows scroll it); escape hands
    them back to the job table, whose arrows move the selection again. The help says so."""
    for size in ((80, 24), (160, 48)):
        app = await finished_job_app(make_app, journal, tmp_path / str(size[0]), 300, size)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: len(log_lines(app)) == 300)
            table = app.screen.query_one(JobTable)
            await pilot.press("slash", *"line 10", "enter")
            assert app.focused is app.screen.query_one(FollowingLog)
            await pilot.press("escape", "down")
            assert app.focused is table and table.cursor_row == 1
            await pilot.press("question_mark")
            keys = str(app.screen.query_one("#help-keys").render())
            assert "Back to the job table" in keys and "Move the keys between the job table and the log" in keys


SIZES = ((80, 24), (160, 48))
HORIZONTAL_BAR_GLYPHS = "▉▊▋▌▍▎▏"  # a horizontal scrollbar's thumb ends (Textual's ScrollBarRender)


def row_text(log: FollowingLog, line: int) -> str:
    """What the pane shows of log line ``line`` (which must be on screen), left of its scrollbar."""
    return log.render_line(line - int(log.scroll_y)).text[:log.scrollable_content_region.width]


LONG = 60  # the long line's index: the lines above it make the log taller than the pane (a scrollbar)


async def long_line_app(make_app, journal, tmp_path):
    run_id, jobs = make_run(journal, tmp_path / "out", keys=KEYS[:2])
    journal.set_run_state(run_id, "finished")
    (tmp_path / "out" / KEYS[0] / "train.log").write_text("short\n" * LONG + "step 5 " + "x" * 400 + " end\nlast\n")
    return make_app()


async def test_a_long_line_ends_in_a_mark_and_draws_no_scrollbar_fragments(make_app, journal, tmp_path):
    """A line wider than the pane ends in "…" at its edge, left of the vertical scrollbar (and
    starts with one once scrolled right); the pane draws no horizontal scrollbar, whose thumb
    showed as stray ▋ glyphs."""
    for size in SIZES:
        app = await long_line_app(make_app, journal, tmp_path / str(size[0]))
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: log_lines(app)[-1:] == ["last"])
            await pilot.pause(0.2)
            log = app.screen.query_one(FollowingLog)
            assert log.scrollbars_enabled[0]  # taller than the pane
            assert row_text(log, LONG).endswith("…") and row_text(log, LONG).startswith("step 5 x")
            assert not row_text(log, LONG - 1).rstrip().endswith("…") and not row_text(log, LONG + 1).rstrip().endswith("…")
            assert not any(glyph in app.export_screenshot() for glyph in HORIZONTAL_BAR_GLYPHS)
            log.focus()
            await pilot.press(*["right"] * 8)
            assert log.scroll_x > len("short")
            assert row_text(log, LONG).startswith("…") and row_text(log, LONG).endswith("…")
            assert row_text(log, LONG - 1).strip() == "…"  # a line scrolled out of sight says it is there


async def test_another_job_leaves_the_last_ones_search_behind(make_app, journal, tmp_path):
    """The search's subtitle ("match line 10 · n/N ...") and highlight belong to the job searched."""
    for size in SIZES:
        app = await finished_job_app(make_app, journal, tmp_path / str(size[0]), 300, size)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: len(log_lines(app)) == 300)
            log = app.screen.query_one(FollowingLog)
            await pilot.press("slash", *"line 10", "enter")
            assert "match line" in str(log.border_subtitle)
            searched = app.screen._selected
            await pilot.press("escape", "down")
            await wait_for(pilot, lambda: app.screen._selected != searched)
            assert not log.border_subtitle and log.highlighter.pattern is None
            await pilot.press("n")  # the table has the keys: nothing to walk, no "no match" warning
            assert not app._notifications


async def test_keys_typed_fast_after_slash_go_to_the_search(make_app, journal, tmp_path, engine_spy):
    """Typed ahead, the search text went to the job table: ``n`` opened a new run's form, ``e``
    started an engine, ``r`` requeued, ``c`` cancelled."""
    from .test_plan_form_fields import type_fast

    for size in SIZES:
        app = await finished_job_app(make_app, journal, tmp_path / str(size[0]), 300, size)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: len(log_lines(app)) == 300)
            screen, pane = app.screen, app.screen.query_one(LogPane)
            calls = len(engine_spy.calls)
            type_fast(app, "slash", *"line 10")
            await wait_for(pilot, lambda: pane.search_field.value == "line 10")
            assert app.screen is screen and app.focused is pane.search_field and len(engine_spy.calls) == calls
            await pilot.press("enter")
            assert app.focused is screen.query_one(FollowingLog) and pane.log._match_line == 108
            type_fast(app, "slash", "slash")  # the second one is search text (replacing the last, selected)
            await wait_for(pilot, lambda: pane.search_field.value == "/")
