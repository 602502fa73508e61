"""The results screen on an output tree built here with known metrics, and the curve renderer alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.text import Text
from textual.app import App
from textual.widgets import ContentSwitcher, DataTable, Static

from lat_tui.screens.results import ResultsScreen, SkippedScreen
from lat_tui.widgets.curve import (BAND_CHAR, BRAILLE_BASE, CurvePlot, Series, axis_label, plot_series, render_curve,
                                   shared_spans)
from lat_tui.widgets.results_model import band_series
from tests.unit.test_results import write_job

COLA = "glue-tvt_cola"
MRPC = "glue-tvt_mrpc"


def evals(values, every=10):
    return [(every * (i + 1), {"mcc": v, "accuracy": 0.5 + v / 2}) for i, v in enumerate(values)]


@pytest.fixture
def runs(tmp_path) -> Path:
    """cola: lora_r8 (2 seeds, best mcc 0.6 / 0.4 -> mean 0.5), dora_r8 (0.3), vera (0.7, one seed),
    one running job, one OOM; mrpc: one config."""
    root = tmp_path / "runs"
    for seed, peak in ((1, 0.6), (2, 0.4)):
        write_job(root, seed=seed, config="lora_r8", evals=evals([0.1, peak]),
                  tests=[(20, {"mcc": 0.55})], losses=[(s, 2.0 - s / 20) for s in range(1, 21)])
    write_job(root, seed=1, config="dora_r8", evals=evals([0.3, 0.2]))
    write_job(root, seed=1, config="vera", evals=evals([0.7]))
    write_job(root, seed=3, config="live", evals=evals([0.05]), finished=False)
    write_job(root, seed=4, config="oom", evals=evals([0.9]), failed="OutOfMemoryError")
    write_job(root, data=MRPC, seed=1, config="lora_r8", evals=[(10, {"f1": 0.8, "accuracy": 0.7})])
    return root


class ResultsApp(App):
    def __init__(self, root: Path, refresh_s: float = 30.0):
        super().__init__()
        self.root, self.refresh_s = root, refresh_s

    def on_mount(self) -> None:
        self.push_screen(ResultsScreen(self.root, refresh_s=self.refresh_s))


async def settle(pilot, screen_test=lambda s: s.snapshot is not None, tries=100):
    for _ in range(tries):
        await pilot.pause(0.05)
        screen = pilot.app.screen
        if isinstance(screen, ResultsScreen) and screen_test(screen):
            return screen
    raise AssertionError("results screen never reached the expected state")


def table_rows(screen) -> list[list[str]]:
    table = screen.query_one("#results-table", DataTable)
    return [[str(Text.from_markup(c) if isinstance(c, str) else c.plain) for c in table.get_row_at(i)]
            for i in range(table.row_count)]


def configs(screen) -> list[str]:
    return [row[0].removeprefix("● ") for row in table_rows(screen)]


# --- the curve renderer on its own --------------------------------------------------------------

def test_plot_extents_and_corners():
    rising = Series("metric", ((0, 0.0), (100, 1.0)))
    plot = plot_series([rising], width=10, height=3)
    assert (plot.x.lo, plot.x.hi) == (0, 100) and (plot.ys[0].lo, plot.ys[0].hi) == (0.0, 1.0)
    assert len(plot.rows) == 3 and all(len(r) == 10 for r in plot.rows)
    # lowest-left dot of the bottom-left cell and highest-right dot of the top-right cell are set
    assert (ord(plot.rows[2][0]) - BRAILLE_BASE) & 0x40
    assert (ord(plot.rows[0][9]) - BRAILLE_BASE) & 0x08
    assert plot.rows[0][0] == " " and plot.rows[2][9] == " "


def test_two_series_keep_their_own_ranges_and_owners():
    loss = Series("loss", ((1, 4.0), (50, 0.5)))
    metric = Series("mcc", ((10, 0.2), (50, 0.8)))
    plot = plot_series([loss, metric], width=20, height=4)
    assert (plot.x.lo, plot.x.hi) == (1, 50)
    assert (plot.ys[0].lo, plot.ys[0].hi) == (0.5, 4.0) and (plot.ys[1].lo, plot.ys[1].hi) == (0.2, 0.8)
    owners = {o for row in plot.owners for o in row}
    assert {0, 1} <= owners
    text = render_curve([loss, metric], width=40, height=7).plain.splitlines()
    assert len(text) == 7 and all(len(line) <= 40 for line in text)
    assert "loss (left)" in text[0] and "mcc (right)" in text[0]
    assert text[1].strip().startswith("4") and text[1].endswith("0.8")
    assert text[-2].strip().startswith("0.5") and text[-2].endswith("0.2")
    assert text[-1].split() == ["1", "50"]


def test_flat_single_point_and_empty_series():
    plot = plot_series([Series("flat", ((5, 1.0),))], width=4, height=2)
    assert sum(ch != " " for row in plot.rows for ch in row) == 1
    assert "no points yet" in render_curve([Series("x", ())], 30, 5).plain
    assert axis_label(0.091351) == "0.09135" and axis_label(123456.0) == "1.2e+05"


def test_band_series_is_the_seeds_mean_with_their_min_max():
    series = band_series("loss", [((1, 1.0), (2, 3.0)), ((1, 3.0),)])
    assert series.points == ((1, 2.0), (2, 3.0))
    assert series.band == ((1, 1.0, 3.0), (2, 3.0, 3.0))
    assert band_series("loss", [((1, 1.0),), ((1, 1.0),)]).band == ()  # seeds agree: no band to draw


def test_a_band_is_stippled_where_no_line_passes_and_widens_the_axis():
    flat = Series("mcc", ((0, 0.5), (10, 0.5)), band=((0, 0.0, 1.0), (10, 0.0, 1.0)))
    plot = plot_series([flat], width=10, height=5)
    assert (plot.ys[0].lo, plot.ys[0].hi) == (0.0, 1.0)  # the band's edges, not the line's 0.5
    assert plot.rows[0] == BAND_CHAR * 10 and plot.rows[4] == BAND_CHAR * 10
    assert all(ch != BAND_CHAR for ch in plot.rows[2])  # the line's row: braille, in the line's colour
    text = render_curve([flat], width=40, height=7).plain
    assert "min-max over seeds" in text.splitlines()[0]


# --- the screen ---------------------------------------------------------------------------------

async def test_table_values_best_mark_and_running(runs):
    async with ResultsApp(runs).run_test(size=(100, 30)) as pilot:
        screen = await settle(pilot)
        rows = {r[0]: r for r in table_rows(screen)}
        assert list(rows) == ["vera", "lora_r8", "dora_r8", "live", "oom"]  # best mcc first, no value last
        assert rows["lora_r8"][1:3] == ["2 of 2", "0.500±0.141"]
        assert rows["vera"][2] == "0.700*" and rows["live"][1] == "0+1 of 1 !"  # none succeeded yet
        assert rows["oom"][1:3] == ["0 of 1 !", "–"]  # its one job failed: counted, marked, listed under k
        table = screen.query_one("#results-table", DataTable)
        best_cell = table.get_row_at(0)[2]
        assert best_cell.style.bold
        status = str(screen.query_one("#results-status", Static).render())
        assert "1 left out: press k to list" in status
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(pilot.app.screen, SkippedScreen)
        assert any("OutOfMemoryError" in line for line in pilot.app.screen.lines)
        await pilot.press("escape")
        await pilot.press("right")
        screen = await settle(pilot, lambda s: s.dataset == MRPC)
        assert configs(screen) == ["lora_r8"]


async def test_sorting_by_key_and_header(runs):
    async with ResultsApp(runs).run_test(size=(100, 30)) as pilot:
        screen = await settle(pilot)
        await pilot.press("S")  # reverse the main metric: worst first
        assert configs(screen) == ["live", "dora_r8", "lora_r8", "vera", "oom"]  # no value: last either way
        await pilot.press("s")  # next column: test mcc, best first, rows without it last
        assert screen.sort_key == "test_mcc" and configs(screen)[0] == "lora_r8"
        await pilot.press("s")  # wraps around to the config name
        assert screen.sort_key == "config" and configs(screen) == ["dora_r8", "live", "lora_r8", "oom", "vera"]
        await pilot.press("s")
        assert screen.sort_key == "n" and configs(screen)[0] == "lora_r8"
        await pilot.click("#results-table", offset=(2, 0))  # the config header
        assert screen.sort_key == "config"


async def test_curve_of_selected_row(runs):
    async with ResultsApp(runs).run_test(size=(100, 30)) as pilot:
        screen = await settle(pilot)
        await pilot.press("down")  # lora_r8
        curve = screen.query_one("#results-curve", CurvePlot)
        loss, metric = curve.series
        assert loss.points[0] == (1, 1.95) and loss.points[-1] == (20, 1.0)
        assert metric.name == "val mcc" and metric.points == ((10, 0.1), (20, 0.5))
        assert loss.band == () and metric.band == ((10, 0.1, 0.1), (20, 0.4, 0.6))  # seeds: 0.4 and 0.6
        text = curve.render().plain
        assert "1.95" in text and "0.6" in text and "20" in text.splitlines()[-1]
        assert BAND_CHAR in text and "min-max over seeds" in text


async def test_compare_two_marked_rows(runs):
    async with ResultsApp(runs).run_test(size=(100, 30)) as pilot:
        screen = await settle(pilot)
        await pilot.press("c")  # nothing marked: stays on the single view
        switcher = screen.query_one("#results-detail", ContentSwitcher)
        assert switcher.current == "results-single"
        await pilot.press("space", "down", "space", "c")
        await pilot.pause()
        assert switcher.current == "results-compare"
        left = str(screen.query_one("#compare-summary-a", Static).render())
        right = str(screen.query_one("#compare-summary-b", Static).render())
        assert left.startswith("vera") and "mcc 0.700*" in left
        assert right.startswith("lora_r8") and "0.500±0.141" in right
        assert screen.query_one("#compare-curve-b", CurvePlot).series[1].points[-1] == (20, 0.5)
        assert table_rows(screen)[0][0] == "● vera"
        sides = [screen.query_one(f"#compare-curve-{side}", CurvePlot).render().plain.splitlines()
                 for side in "ab"]
        # one scale: both plots label the metric axis from the lower of the two minima to 0.7
        assert [lines[1].rstrip().endswith("0.7") for lines in sides] == [True, True]
        assert sides[0][-2].rstrip().endswith("0.1") and sides[1][-2].rstrip().endswith("0.1")


async def test_legend_explains_the_star_and_queued_jobs_are_not_skipped(runs):
    queued = runs / f"{COLA}_seed9" / "waiting"
    queued.mkdir(parents=True)
    (queued / "job.yaml").write_text("name: waiting\n")
    async with ResultsApp(runs).run_test(size=(100, 30)) as pilot:
        screen = await settle(pilot)
        legend = str(screen.query_one("#results-legend", Static).render())
        assert legend.startswith("* best mean±std") and "n: succeeded (+running) of planned" in legend
        status = str(screen.query_one("#results-status", Static).render())
        assert "1 queued" in status and "1 left out" in status  # the OOM job only


def test_shared_spans_cover_every_plot_at_each_position():
    a = [Series("loss", ((1, 2.0), (2, 1.0))), Series("mcc", ((1, 0.2),))]
    b = [Series("loss", ((1, 3.0),)), Series("mcc", ((1, 0.6), (2, 0.9)))]
    loss, mcc = shared_spans([a, b])
    assert (loss.lo, loss.hi, mcc.lo, mcc.hi) == (1.0, 3.0, 0.2, 0.9)


async def test_new_eval_appears_after_refresh(runs):
    async with ResultsApp(runs, refresh_s=0.1).run_test(size=(100, 30)) as pilot:
        screen = await settle(pilot)
        await pilot.press("down", "down", "down")  # the running job, keep the cursor there
        assert screen.selected_config() == "live"
        events = runs / f"{COLA}_seed3" / "live" / "events.jsonl"
        with events.open("a") as fh:
            for line in ({"event": "eval", "step": 20, "split": "validation", "metrics": {"mcc": 0.95}},
                         {"event": "checkpoint", "step": 20, "path": "checkpoint-20"}):
                fh.write(json.dumps(line) + "\n")
        screen = await settle(pilot, lambda s: configs(s)[0] == "live")
        assert table_rows(screen)[0][2] == "0.950*"
        assert screen.selected_config() == "live"


async def test_fits_80x24_and_escape_closes(runs):
    async with ResultsApp(runs).run_test(size=(80, 24)) as pilot:
        screen = await settle(pilot)
        for widget_id in ("#results-table", "#results-curve", "#results-status"):
            region = screen.query_one(widget_id).region
            assert region.height > 0 and region.right <= 80 and region.bottom <= 24
        assert screen.query_one("#results-table", DataTable).region.height >= 5
        assert screen.query_one("#results-curve").region.height >= 8
        await pilot.press("escape")
        assert not isinstance(pilot.app.screen, ResultsScreen)


async def test_missing_root_is_reported_and_retried(tmp_path):
    async with ResultsApp(tmp_path / "not_yet", refresh_s=0.1).run_test(size=(80, 24)) as pilot:
        for _ in range(40):
            await pilot.pause(0.05)
            status = str(pilot.app.screen.query_one("#results-status", Static).render())
            if "is not a directory" in status:
                break
        assert "is not a directory" in status and "retrying" in status
        write_job(tmp_path / "not_yet", seed=1, config="late", evals=evals([0.4]))
        screen = await settle(pilot)
        assert configs(screen) == ["late"]


@pytest.fixture
def journal_run(tmp_path):
    """A run in a real journal: lora_r8 planned on three seeds of CoLA (seed 1 succeeded, seed 2 failed
    with triage's reason, seed 3 cancelled while queued), and dora_r8 running with one checkpointed eval."""
    from lat_core.contract.states import JobState
    from lat_core.front.service import open_store

    root = tmp_path / "out"
    folders = {1: write_job(root, seed=1, evals=evals([0.2, 0.6])),
               2: write_job(root, seed=2, evals=evals([0.3]), failed="OutOfMemoryError"),
               3: root / f"{COLA}_seed3" / "lora_r8"}
    folders[3].mkdir(parents=True)
    (folders[3] / "job.yaml").write_text("name: lora_r8\n")
    running = write_job(root, seed=1, config="dora_r8", evals=evals([0.4]), finished=False)
    store = open_store(tmp_path / "state")
    run_id = store.create_run("p: 1", str(root), [{"id": "cpu", "label": "cpu", "slots": 1, "env": {}}], 0)
    jobs = [{"key": f"{folder.parent.name}/{folder.name}", "suite": "s", "round": 1, "stem": folder.name,
             "seed": seed, "dataset": COLA, "job_dir": str(folder), "argv": ["true"], "env": {}}
            for seed, folder in [*folders.items(), (1, running)]]
    ids = store.add_jobs(run_id, jobs)
    store.set_job_state(ids[0], JobState.SUCCEEDED, "exit 0")
    store.set_job_state(ids[1], JobState.FAILED, "exit 1", error="gpu_oom: CUDA out of memory at step 12")
    store.set_job_state(ids[2], JobState.CANCELLED, "cancelled by user", error="cancelled by user")
    store.set_job_state(ids[3], JobState.RUNNING, "launched")
    return tmp_path / "state", root, ids


class JournalResultsApp(App):
    def __init__(self, state, root: Path):
        super().__init__()
        self.state, self.root = state, root

    def on_mount(self) -> None:
        from lat_core.front.client import Client
        self.push_screen(ResultsScreen(self.root, refresh_s=30.0, client=Client(self.state)))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_counts_and_reasons_agree_with_the_report(journal_run, size):
    """The screen's n column reads as `lat-tui results` writes it for the same run (render.count_text
    over the same accounts), and each job in no table is one key away with the journal's reason."""
    from lat_core.results import aggregate, build_tables
    from lat_core.results.render import count_text

    state, root, ids = journal_run
    async with JournalResultsApp(state, root).run_test(size=size) as pilot:
        screen = await settle(pilot)
        rows = {r[0]: r for r in table_rows(screen)}
        assert rows["lora_r8"][1:3] == ["1 of 3 !", "0.600*"]
        assert rows["dora_r8"][1] == "0+1 of 1 !"  # running: its best so far, counted apart
        report = aggregate(root, jobs=screen.client.jobs(1), runs=[1], strays=False)
        (table,) = build_tables(report)
        assert {r.config: count_text(r) for r in table.rows}["lora_r8"] == rows["lora_r8"][1]
        for widget_id in ("#results-table", "#results-legend", "#results-status"):
            region = screen.query_one(widget_id).region
            assert region.height > 0 and region.right <= size[0] and region.bottom <= size[1]
        n_column = screen.query_one("#results-table", DataTable).columns["n"]
        assert n_column.get_render_width(screen.query_one("#results-table", DataTable)) >= len("0+1 of 1 !")
        status = str(screen.query_one("#results-status", Static).render())
        assert "1 succeeded · 1 running" in status and "2 left out: press k to list" in status
        summary = str(screen.query_one("#results-summary", Static).render()).splitlines()
        assert summary[:3] == ["lora_r8", COLA, "n 1 of 3 !"]  # the count on a line of its own: never cut
        await pilot.press("k")
        await pilot.pause()
        lines = pilot.app.screen.lines
        assert lines == [f"job {ids[1]} lora_r8 2:{COLA} · failed: gpu_oom: CUDA out of memory at step 12",
                         f"job {ids[2]} lora_r8 3:{COLA} · cancelled: cancelled by user"]


async def test_dashboard_R_opens_the_results_of_its_run(tmp_path):
    from lat_core.config.suites import SuiteRegistry
    from lat_core.monitor.fake_nvml import FakeNvml
    from lat_core.monitor.gpu import GpuProbe
    from lat_core.front.service import open_store
    from lat_tui.app import LatApp
    from lat_tui.screens.results import ResultsScreen

    state = tmp_path / "state"
    store = open_store(state)
    store.create_run("p: 1", str(tmp_path / "out"), [{"id": "cpu", "label": "cpu", "slots": 1, "env": {}}], 0)
    (tmp_path / "configs" / "suites").mkdir(parents=True)
    app = LatApp(state, SuiteRegistry(tmp_path / "configs"), GpuProbe(FakeNvml(init_error="no driver")),
                 engine_starter=lambda *a, **k: False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, ResultsScreen)


SNAPSHOT = Path(__file__).parent / "snapshots" / "results_screen_80x24.txt"


def screen_text(app) -> str:
    """The screen as plain text, line by line: a snapshot that survives colour/theme changes."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips) + "\n"


async def test_results_screen_snapshot(runs):
    """Compare with the stored snapshot; LAT_UPDATE_SNAPSHOTS=1 rewrites it after a deliberate change."""
    import os

    app = ResultsApp(runs)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.pause(0.2)
        text = screen_text(app)
    text = text.replace(str(runs), "<root>")
    if os.environ.get("LAT_UPDATE_SNAPSHOTS") == "1" or not SNAPSHOT.exists():
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text(), "results screen changed; inspect and rerun with LAT_UPDATE_SNAPSHOTS=1"


def one_suite(tmp_path) -> Path:
    """A config tree of one suite (demo: one config, a) for the real front end to plan from."""
    configs = tmp_path / "configs"
    (configs / "experiments" / "gla").mkdir(parents=True)
    (configs / "suites").mkdir()
    (configs / "experiments" / "gla" / "a.yaml").write_text("model: {family: gla}\ntrain: {lr: 0.001}\n")
    (configs / "suites" / "demo.yaml").write_text("rounds: {1: [gla/a.yaml]}\n")
    return configs


@pytest.fixture
def swept(tmp_path) -> Path:
    """A 3 x 2 grid on RTE with two seeds (tests/unit/test_results_sweeps: GRID, ACCURACY): its output root."""
    from tests.unit.test_results_sweeps import grid_tree

    return grid_tree(one_suite(tmp_path), tmp_path)


async def test_w_shows_the_sweep_by_its_values_with_the_best_point_and_the_pruned_counted(swept):
    async with ResultsApp(swept).run_test(size=(100, 30)) as pilot:
        screen = await settle(pilot)
        await pilot.press("w")
        points = screen.query_one("#results-sweep", DataTable)
        assert points.display and not screen.query_one("#results-table", DataTable).display
        labels = [str(column.label) for column in points.columns.values()]
        assert labels == ["sweep", "train.lr", "peft.r", "n", "accuracy", "not in the mean"]
        rows = [[str(c) if isinstance(c, str) else c.plain for c in points.get_row_at(i)] for i in range(points.row_count)]
        assert rows[2] == ["a", "1e-3", "4", "2 of 2", "0.820±0.028*", ""]  # the best point, starred
        assert rows[4] == ["a", "0.01", "4", "1 of 2 !", "0.500", "1 failed"]
        assert rows[5] == ["a", "0.01", "8", "0 of 2 !", "–", "2 pruned"]
        assert points.get_row_at(2)[4].style.bold
        legend = str(screen.query_one("#results-legend", Static).render())
        assert legend.startswith("* best full point")
        await pilot.press("down", "down")  # the best point: its own config's curve in the detail pane
        assert screen.selected_config() == "a__lr1e-3_r4"
        assert screen.query_one("#results-curve", CurvePlot).series[1].points[-1] == (4, pytest.approx(0.82))
        await pilot.press("w")
        assert screen.query_one("#results-table", DataTable).display and not points.display


async def test_w_is_offered_only_where_a_dataset_has_a_sweep(runs):
    async with ResultsApp(runs).run_test(size=(100, 30)) as pilot:
        screen = await settle(pilot)
        assert screen.check_action("sweep", ()) is False
        await pilot.press("w")
        assert not screen.sweep_view and screen.query_one("#results-table", DataTable).display


async def test_a_two_stage_searchs_screening_points_are_labelled_and_never_starred(tmp_path):
    from tests.unit.test_results_sweeps import stages_tree

    async with ResultsApp(stages_tree(one_suite(tmp_path), tmp_path)).run_test(size=(80, 24)) as pilot:
        screen = await settle(pilot)
        await pilot.press("w")
        points = screen.query_one("#results-sweep", DataTable)
        assert [str(column.label) for column in points.columns.values()] == [
            "sweep", "train.lr", "stage", "n", "accuracy", "not in the mean"]
        rows = [[str(c) if isinstance(c, str) else c.plain for c in points.get_row_at(i)] for i in range(points.row_count)]
        assert [row[1:5] for row in rows] == [
            ["1e-4", "full", "0 of 2 !", "–"], ["1e-3", "full", "2 of 2", "0.860±0.014*"], ["0.01", "full", "0 of 2 !", "–"],
            ["1e-4", "screen", "1 of 1", "0.700"], ["1e-3", "screen", "1 of 1", "0.900"],
            ["0.01", "screen", "1 of 1", "0.500"]]
        assert rows[0][5] == "2 pruned"
