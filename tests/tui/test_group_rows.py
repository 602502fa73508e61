"""A fused group in the dashboard's job table: one line with the group's measured memory, its
members' rows under it on tree branches, with no memory of their own (a share would read as a
measurement)."""

from __future__ import annotations

import pytest

from lat_tui.widgets.job_table import JobTable
from tests.tui.test_dashboard import cell, make_run, wait_for

GiB = 2**30
KEYS = ("tiny-sst2_seed1/a", "tiny-sst2_seed2/a", "tiny-sst2_seed3/a")


def row_keys(app) -> list[str]:
    return [row.key.value for row in app.screen.query_one(JobTable).ordered_rows]


async def test_a_group_shows_as_its_line_with_its_members_under_it(make_app, journal, tmp_path):
    run_id, (first, second, third) = make_run(journal, tmp_path / "out", keys=KEYS)
    app = make_app()
    async with app.run_test(size=(120, 24)) as pilot:
        await wait_for(pilot, lambda: row_keys(app) == [str(first), str(second), str(third)])
        journal.set_run_state(run_id, "running")
        for job in (first, third):  # the engine starts the first and third queued jobs as one group
            journal.start_attempt(job, "cpu", str(tmp_path / f"{job}.exit.json"))
        journal.start_group(f"{first}.1", run_id, "cpu", 2, [first, third])
        journal.record_group_usage(f"{first}.1", 2, int(2.4 * GiB), 46 * GiB)
        await wait_for(pilot, lambda: row_keys(app) == [f"g{first}.1", str(first), str(third), str(second)])
        table = app.screen.query_one(JobTable)
        assert cell(app, f"g{first}.1", "key").startswith(f"group {first}.1: 2 jobs")
        assert (cell(app, f"g{first}.1", "rss"), cell(app, f"g{first}.1", "gpu")) == ("2.4G", "46G")
        assert cell(app, f"g{first}.1", "state") == "running"
        for member in (first, third):
            assert cell(app, member, "key")[0] in "├└"
            assert (cell(app, member, "rss"), cell(app, member, "gpu")) == ("", "")
        table.move_cursor(row=0)
        assert table.selected_job_id() == first  # the group's line stands for its first member
        await pilot.pause()
        assert app.screen._selected == first


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_members_hang_on_branches_under_a_line_that_says_they_share_a_process(make_app, journal, tmp_path,
                                                                                     size):
    keys = (*KEYS, "tiny-sst2_seed4/a")
    run_id, (first, second, third, fourth) = make_run(journal, tmp_path / "out", keys=keys)
    journal.set_run_state(run_id, "running")
    for job in (first, second, fourth):
        journal.start_attempt(job, "cpu", str(tmp_path / f"{job}.exit.json"))
    journal.start_group(f"{first}.1", run_id, "cpu", 3, [first, second, fourth])
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: row_keys(app)[:1] == [f"g{first}.1"])
        assert row_keys(app) == [f"g{first}.1", str(first), str(second), str(fourth), str(third)]
        title = cell(app, f"g{first}.1", "key")
        assert len(title) <= app.screen.query_one(JobTable).key_width
        assert title == (f"group {first}.1: 3 jobs in one process" if size[0] >= 160 else f"group {first}.1: 3 jobs")
        assert [cell(app, job, "key")[:2] for job in (first, second, fourth)] == ["├ ", "├ ", "└ "]
        assert cell(app, third, "key")[0] not in "├└ "  # a job with a process of its own
