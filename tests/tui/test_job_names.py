"""The job table's names at 80x24 and 160x48: no two rows read the same, a shortened name says so,
and a fused member's row (two cells of branch) keeps them apart too. The walk-through's table (the
demo suite swept over train.lr on two datasets) read ``qk…-3 1:sst2`` for both of gla's points."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lat_tui.widgets.job_detail import JobDetail
from lat_tui.widgets.job_table import JobTable
from tests.tui.test_dashboard import PLAN_YAML, cell, text_of, wait_for

DEMO = (("gla", "tiny_lora_qkvo"), ("mamba", "tiny_lora"))
LR_SWEEP = [(family, f"{stem}__lr{lr}", 1, data) for family, stem in DEMO for lr in ("1e-3", "5e-3")
            for data in ("tiny-sst2", "tiny-cola")]
LONG_SWEEP = [(family, f"{stem}__warmup-steps{steps}_batch-size{size}", 87, data)
              for family, stem in (("gla", "tiny_lora_targets"), ("mamba", "tiny_lora"))
              for steps in (0, 10) for size in (8, 16) for data in ("glue-tvt_cola", "glue-tvt_rte")]
GRID = [("gla", f"tiny_lora_qkvo__lr{lr}_r{r}", 1, data) for data in ("tiny-sst2", "tiny-cola")
        for lr in ("1e-3", "5e-3") for r in (8, 16)]


def add_run(store, root: Path, jobs: list[tuple[str, str, int, str]]) -> list[int]:
    """A run of ``jobs`` (family, config stem, seed, dataset), each family in its job.yaml."""
    run_id = store.create_run(f"{PLAN_YAML}output_root: {json.dumps(str(root))}\n", str(root),
                              [{"id": "cpu", "label": "cpu", "slots": 2, "env": {}}], time.time())
    records = []
    for family, stem, seed, dataset in jobs:
        job_dir = root / f"{dataset}_seed{seed}" / stem
        job_dir.mkdir(parents=True)
        (job_dir / "job.yaml").write_text(f"model: {{family: {family}}}\n")
        records.append({"key": f"{dataset}_seed{seed}/{stem}", "suite": "demo", "round": 1, "stem": stem,
                        "seed": seed, "dataset": dataset, "job_dir": str(job_dir), "argv": [], "env": {}})
    return store.add_jobs(run_id, records)


def whole_name(job: tuple[str, str, int, str]) -> str:
    family, stem, seed, dataset = job
    return f"{family}/{stem} {seed}:{dataset}"


async def table_names(pilot, ids: list[int]) -> list[str]:
    app = pilot.app
    await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count >= len(ids))
    await wait_for(pilot, lambda: all("/" in cell(app, job, "key") or "…" in cell(app, job, "key") for job in ids))
    return [cell(app, job, "key") for job in ids]


def assert_apart(names: list[str], jobs: list[tuple[str, str, int, str]], width: int) -> None:
    assert len(set(names)) == len(names), names
    for name, job in zip(names, jobs):
        assert len(name) <= width, name
        assert name == whole_name(job) or "…" in name, name  # a shortened name says so


@pytest.mark.parametrize("size, jobs", [((80, 24), LR_SWEEP), ((160, 48), LR_SWEEP), ((160, 48), LONG_SWEEP)],
                         ids=["80x24-lr-sweep", "160x48-lr-sweep", "160x48-long-sweep"])
async def test_no_two_rows_read_the_same(make_app, journal, tmp_path, size, jobs):
    ids = add_run(journal, tmp_path / "out", jobs)
    async with make_app().run_test(size=size) as pilot:
        names = await table_names(pilot, ids)
        assert_apart(names, jobs, pilot.app.screen.query_one(JobTable).key_width)
        if size == (80, 24) and jobs is LR_SWEEP:
            assert names[:3] == ["…qkvo__lr1e-3 sst2", "…qkvo__lr1e-3 cola", "…qkvo__lr5e-3 sst2"]
            assert names[4] == "…lora__lr1e-3 sst2"
        elif jobs is LR_SWEEP:
            assert names == [whole_name(job) for job in jobs]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_fused_members_keep_their_points_apart_on_their_branches(make_app, journal, tmp_path, size):
    ids = add_run(journal, tmp_path / "out", GRID)
    run_id = journal.job(ids[0]).run_id
    journal.set_run_state(run_id, "running")
    members = ids[:4]  # the sst2 points share one process
    for job in members:
        journal.start_attempt(job, "cpu", str(tmp_path / f"{job}.exit.json"))
    journal.start_group(f"{ids[0]}.1", run_id, "cpu", 4, members)
    async with make_app().run_test(size=size) as pilot:
        await wait_for(pilot, lambda: cell(pilot.app, members[-1], "key").startswith("└ "))
        names = await table_names(pilot, ids)
        assert [name[:2] for name in names[:4]] == ["├ ", "├ ", "├ ", "└ "]
        assert_apart([name[2:] if n < 4 else name for n, name in enumerate(names)], GRID,
                     pilot.app.screen.query_one(JobTable).key_width)
        for name, (_, stem, _, _) in zip(names, GRID):
            assert stem.split("__")[1] in name  # lr1e-3_r16: both swept values


async def test_a_waiting_line_names_the_job_it_waits_for_as_the_table_does(make_app, journal, tmp_path):
    """The engine names the job waited for in full; at 80 columns its distinguishing end would
    go past the screen's edge."""
    ids = add_run(journal, tmp_path / "out", LONG_SWEEP)
    last = LONG_SWEEP[-1]
    journal.set_waiting(ids[0], f"waiting for job {ids[-1]} ({whole_name(last)}) to succeed")
    async with make_app().run_test(size=(80, 24)) as pilot:
        names = await table_names(pilot, ids)
        await wait_for(pilot, lambda: "waiting for" in text_of(pilot.app, JobDetail))
        line = text_of(pilot.app, JobDetail).splitlines()[1]
        assert line == f"waiting for job {ids[-1]} ({names[-1]}) to succeed"
        assert len(line) <= 78  # the detail line's width inside its padding


async def test_a_resized_screen_lays_the_table_out_again(make_app, journal, tmp_path):
    """Names and columns follow the screen: 80 columns narrow them, 160 show them whole, with the
    ``try`` column back; the cursor stays on its job."""
    ids = add_run(journal, tmp_path / "out", LR_SWEEP)
    async with make_app().run_test(size=(80, 24)) as pilot:
        names = await table_names(pilot, ids)
        assert names[0] == "…qkvo__lr1e-3 sst2"
        await pilot.press("down", "down")
        table = pilot.app.screen.query_one(JobTable)
        await wait_for(pilot, lambda: table.selected_job_id() == ids[2])
        await pilot.resize_terminal(160, 48)
        await wait_for(pilot, lambda: cell(pilot.app, ids[0], "key") == whole_name(LR_SWEEP[0]))
        assert cell(pilot.app, ids[0], "attempts") == "0"
        assert table.selected_job_id() == ids[2]
