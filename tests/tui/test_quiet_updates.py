"""The dashboard's idle cost: a poll that changes little repaints little (bench/bench_tui_idle.py
measures the CPU; these tests pin the mechanisms that keep it low)."""

from __future__ import annotations

from rich.console import Console
from textual.app import App, ComposeResult
from textual.renderables.sparkline import Sparkline as SparklineRenderable
from textual.widgets import Sparkline, Static

from lat_tui.widgets.job_table import JobTable
from lat_tui.widgets.quiet import set_content, set_data, sparkline_bars
from tests.tui.test_dashboard import cell, make_run, wait_for

SPARK_WIDTH = 12


class Widgets(App):
    def compose(self) -> ComposeResult:
        yield Static(id="line")
        yield Sparkline([0.0], summary_function=max, id="spark")

    def on_mount(self) -> None:
        self.query_one("#spark").styles.width = SPARK_WIDTH


def spy_refreshes(widget) -> list[bool]:
    """The ``layout`` flag of each refresh the widget asks for from now on."""
    calls: list[bool] = []
    original = widget.refresh

    def refresh(*regions, **kwargs):
        calls.append(bool(kwargs.get("layout")))
        return original(*regions, **kwargs)

    widget.refresh = refresh
    return calls


async def test_content_of_the_same_shape_repaints_without_a_layout():
    app = Widgets()
    async with app.run_test(size=(60, 6)) as pilot:
        line = app.query_one("#line", Static)
        set_content(line, "RAM  3.1/31G · load 0.4/2")
        await pilot.pause()
        layouts = spy_refreshes(line)
        set_content(line, "RAM  3.2/31G · load 0.5/2")  # the host line's usual change
        assert layouts == [False]
        set_content(line, "RAM  3.2/31G · load 0.5/2")  # no change: no refresh at all
        assert layouts == [False]
        set_content(line, "RAM  3.2/31G · load 10.5/2")  # one cell wider: the layout may change
        set_content(line, "RAM  3.2/31G\nload 10.5/2")  # two lines
        assert layouts == [False, True, True]
        assert str(line.render()) == "RAM  3.2/31G\nload 10.5/2"


def drawn_bars(data: list[float], width: int) -> tuple[int, ...]:
    """The bar heights Textual's sparkline renderable draws for ``data`` at ``width``."""
    console = Console(width=width, color_system=None, legacy_windows=False)
    segments = console.render(SparklineRenderable(data, width=width, summary_function=max), console.options)
    glyphs = "".join(s.text for s in segments if s.text.strip("\n"))
    return tuple(SparklineRenderable.BARS.index(g) for g in glyphs)


def test_sparkline_bars_match_what_textual_draws():
    series = [[3.0, 3.0], [1.0, 5.0, 2.0], [float(n % 7) for n in range(60)], [50.0] * 40 + [51.0] * 3,
              [float(n) for n in range(5)]]
    for data in series:
        for width in (3, 8, SPARK_WIDTH, 40):
            assert sparkline_bars(data, width) == drawn_bars(data, width), (data, width)


async def test_sparkline_takes_new_data_only_when_its_bars_change():
    app = Widgets()
    async with app.run_test(size=(60, 6)) as pilot:
        spark = app.query_one("#spark", Sparkline)
        await pilot.pause()
        set_data(spark, [20.0, 20.0])
        steady = spark.data
        set_data(spark, [20.0] * 30)  # a flat history growing: the same flat line
        assert spark.data is steady
        set_data(spark, [20.0] * 30 + [40.0])  # a rise: the last column grows
        assert spark.data == [20.0] * 30 + [40.0]


async def test_a_changed_job_repaints_its_own_row_only(make_app, journal, tmp_path):
    keys = tuple(f"tiny-sst2_seed{n}/a" for n in range(1, 7))
    run_id, job_ids = make_run(journal, tmp_path / "out", keys=keys)
    journal.set_run_state(run_id, "running")
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.screen.query_one(JobTable)
        await wait_for(pilot, lambda: table.row_count == len(keys))
        await pilot.pause(0.3)
        rendered: list[str] = []
        original = table._render_line_in_row

        def render_line_in_row(row_key, *args, **kwargs):
            rendered.append(row_key.value)
            return original(row_key, *args, **kwargs)

        table._render_line_in_row = render_line_in_row
        journal.set_progress(job_ids[3], 20, 0.5)
        journal.set_job_state(job_ids[4], "succeeded", returncode=0, attempts=1)
        await wait_for(pilot, lambda: cell(app, job_ids[3], "step") == "20")
        await pilot.pause(0.3)
        assert rendered and set(rendered) == {str(job_ids[3]), str(job_ids[4])}
        assert "0.5000" in drawn_row(table, 3) and "succeeded" in drawn_row(table, 4)  # what is drawn changed too
        assert "queued" in drawn_row(table, 2)
        journal.set_progress(job_ids[3], 30, 0.25)  # again: nothing of the first change may be drawn now
        await wait_for(pilot, lambda: cell(app, job_ids[3], "step") == "30")
        await pilot.pause(0.3)
        assert "0.2500" in drawn_row(table, 3) and " 30 " in drawn_row(table, 3)


def drawn_row(table: JobTable, index: int) -> str:
    """The row's line as the table draws it (through its render caches)."""
    return table.render_line(table.header_height + index).text
