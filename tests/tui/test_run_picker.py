"""The run picker (ctrl+r) counts each run's jobs, so the run with failures is found at a glance."""

from __future__ import annotations

import pytest
from textual.widgets import OptionList

from lat_tui.screens.runs import RunPicker

from .test_controls import fail, on_dashboard
from .test_dashboard import make_run, wait_for

SIZES = [(80, 24), (160, 48)]
KEYS = tuple(f"tiny-sst2_seed{n}/a" for n in range(1, 6))


def option_text(app, index: int) -> str:
    return str(app.screen.query_one(OptionList).get_option_at_index(index).prompt)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_each_run_shows_its_jobs_counts_and_failures(make_app, journal, tmp_path, size):
    old_run, (first, second) = make_run(journal, tmp_path / "old")
    journal.set_run_state(old_run, "running")
    fail(journal, first)
    journal.set_job_state(second, "succeeded", device="cpu", started=1.0, ended=2.0, attempts=1, returncode=0)
    journal.set_run_state(old_run, "finished")
    new_run, jobs = make_run(journal, tmp_path / "new", keys=KEYS)
    journal.set_run_state(new_run, "running")
    journal.start_attempt(jobs[0], "cpu", str(tmp_path / "exit.json"))
    fail(journal, jobs[1])
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_dashboard(pilot, app, rows=5)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, RunPicker))
        assert "1 running · 3 queued · 1 failed" in option_text(app, 0)  # newest first
        assert "1 done · 1 failed" in option_text(app, 1)
        picker = app.screen.query_one(OptionList)
        shown = "\n".join(picker.render_line(y).text for y in range(picker.content_region.height))
        assert "1 running · 3 queued · 1 failed" in shown and "1 done · 1 failed" in shown


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_long_output_root_keeps_its_end_on_its_line(make_app, journal, tmp_path, size):
    """Runs' output roots differ at their end: a root too long for its line once wrapped into
    two halves of a folder name (``.../n`` and ``ovember/...``)."""
    root = tmp_path / ("a-rather-long-directory-name-" * 3) / "for-the-experiments-of" / "november" / "runs-sweep-lr"
    make_run(journal, root)
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await on_dashboard(pilot, app, rows=2)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, RunPicker))
        picker = app.screen.query_one(OptionList)
        shown = [picker.render_line(y).text.strip(" ▊▎") for y in range(picker.content_region.height)]
        where = next(line for line in shown if "runs-sweep-lr" in line)
        assert "…/" in where and where.endswith("/november/runs-sweep-lr"), shown  # whole folders
        assert len([line for line in shown if line]) == 2  # the run's two lines, nothing wrapped
