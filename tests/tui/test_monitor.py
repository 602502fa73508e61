"""The monitor panel with a fake NVML: normal, no driver, a GPU vanishing mid-run; and the layout."""

from __future__ import annotations

import time

import psutil
import pytest
from textual.widgets import Log, Sparkline

from lat_core.config.suites import SuiteRegistry
from lat_core.monitor.fake_nvml import FakeGpu, FakeNvml, FakeNvmlError
from lat_core.monitor.gpu import GpuProbe
from lat_tui.app import LatApp
from lat_tui.widgets.job_table import JobTable
from lat_tui.widgets.monitor import GpuRow, MonitorPanel, cpu_line, short_name

from .test_dashboard import SIZE, make_run, wait_for

GIB = 2**30


@pytest.fixture
def fake_nvml() -> FakeNvml:
    return FakeNvml([FakeGpu(uuid="GPU-a", used=40 * GIB, util=87, temperature=63, processes=[(11, GIB)]),
                     FakeGpu(uuid="GPU-b", name="NVIDIA A100-SXM4-40GB", total=40 * GIB, used=39 * GIB,
                             util=100, temperature=71)])


@pytest.fixture
def app_with(state_dir, configs_dir, engine_spy):
    def make(nvml: FakeNvml) -> LatApp:
        return LatApp(state_dir, SuiteRegistry(configs_dir), GpuProbe(nvml), engine_starter=engine_spy)
    return make


def monitor_lines(app) -> list[str]:
    return [str(w.render()) for w in app.screen.query("#monitor Static") if w.display]


async def test_one_line_per_gpu_with_bar_util_temperature_and_history(app_with, fake_nvml, journal, tmp_path,
                                                                     monkeypatch):
    # every poll redraws the sparkline here: a loaded CI machine stretched three 5-s redraws past the wait
    monkeypatch.setattr("lat_tui.widgets.monitor.HISTORY_REDRAW_S", 0.0)
    make_run(journal, tmp_path / "out")
    app = app_with(fake_nvml)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(app.screen.query(GpuRow)) == 2 and "GPU1" in " ".join(monitor_lines(app)))
        gpu0, gpu1, host = monitor_lines(app)  # no CPU line while there are GPUs
        assert gpu0.startswith("GPU0 H100 80GB") and "40.0/80G" in gpu0 and "87%" in gpu0 and "63°C" in gpu0
        assert "█████░░░░░" in gpu0 and "1p" in gpu0
        assert gpu1.startswith("GPU1 A100-SXM4") and "39.0/40G" in gpu1 and "100%" in gpu1
        assert host.startswith("host RAM") and "load" in host and "slots cpu=2" in host
        # a new sample reaches the sparkline, after the earlier ones (flat history that draws the same
        # bars is not redrawn, so waiting for a count of identical samples raced the layout)
        sparkline = app.screen.query_one(GpuRow).query_one(Sparkline)
        fake_nvml.gpus[0].used = 60 * GIB
        await wait_for(pilot, lambda: list(sparkline.data)[-1:] == [pytest.approx(75.0)])
        assert len(sparkline.data) >= 2 and sparkline.data[0] == pytest.approx(50.0)


async def test_no_driver_shows_the_reason(app_with, journal, tmp_path):
    make_run(journal, tmp_path / "out")
    app = app_with(FakeNvml(init_error="Driver Not Loaded"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: any("Driver Not Loaded" in line for line in monitor_lines(app)))
        reason, cpu, host = monitor_lines(app)
        assert reason == "no GPU visible (NVML: Driver Not Loaded)"
        assert cpu.startswith("host CPU") and "%" in cpu and f"{psutil.cpu_count()} cores" in cpu
        assert host.startswith("host RAM") and "G" in host
        assert not app.screen.query(GpuRow)


async def test_gpu_vanishing_mid_run_does_not_crash(app_with, fake_nvml, journal, tmp_path):
    make_run(journal, tmp_path / "out")
    app = app_with(fake_nvml)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(app.screen.query(GpuRow)) == 2)
        fake_nvml.gpus.pop(0)
        await wait_for(pilot, lambda: len(app.screen.query(GpuRow)) == 1)
        await wait_for(pilot, lambda: monitor_lines(app)[0].startswith("GPU0 A100"))
        fake_nvml.gpus.clear()
        await wait_for(pilot, lambda: "no GPU visible (NVML: NVML sees 0 devices)" in monitor_lines(app))

        def fell_off_the_bus():
            raise FakeNvmlError("GPU is lost")
        fake_nvml.nvmlDeviceGetCount = fell_off_the_bus
        await wait_for(pilot, lambda: "no GPU visible (NVML: GPU is lost)" in monitor_lines(app))
        assert app.screen.query_one(JobTable).row_count == 2  # the dashboard goes on


async def test_m_hides_and_shows_the_panel(app_with, fake_nvml, journal, tmp_path):
    make_run(journal, tmp_path / "out")
    app = app_with(fake_nvml)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(app.screen.query(GpuRow)) == 2)
        await pilot.pause(0.3)
        table_top = app.screen.query_one(JobTable).region.y
        assert table_top == 4  # the run line, two GPU lines, the host line
        await pilot.press("m")
        await pilot.pause(0.2)
        assert not app.screen.query_one(MonitorPanel).display
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).region.y == 1)
        await pilot.press("m")
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).region.y == table_top)


@pytest.mark.parametrize("gpus", [2, 8])
async def test_layout_with_the_monitor_fits_80x24(app_with, journal, tmp_path, gpus):
    keys = [f"glue-tvt_sst2_seed{n}/gla_lora_r8_a_rather_long_config_name" for n in range(1, 16)]
    run_id, ids = make_run(journal, tmp_path / "out", keys=keys)
    journal.set_job_state(ids[0], "running", device="cpu", started=time.time() - 5, attempts=1)
    journal.record_usage({ids[0]: (1288 * 2**20, 12 * GIB)})
    app = app_with(FakeNvml.with_gpus(gpus, used=20 * GIB))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count == 15
                       and len(app.screen.query(GpuRow)) == gpus)
        await pilot.pause(0.3)
        screen = app.screen
        table, log, monitor = screen.query_one(JobTable), screen.query_one("#job-log", Log), screen.query_one(MonitorPanel)
        assert table.region.height >= 5 and log.region.height >= 5
        assert log.region.bottom <= 23 and table.region.right <= 80 and monitor.region.right <= 80
        assert str(table.get_cell(str(ids[0]), "rss")) == "1.3G" and str(table.get_cell(str(ids[0]), "gpu")) == "12G"
        assert table.get_cell(str(ids[0]), "key") == "gla_lor…fig_name@1"  # one dataset: config and seed
        assert table.get_cell(str(ids[0]), "id") == str(ids[0])
        columns = sum(c.get_render_width(table) for c in table.columns.values())
        assert columns + table.styles.scrollbar_size_vertical <= 80  # the columns and the scrollbar


def test_short_names():
    assert short_name("NVIDIA H100 80GB HBM3") == "H100 80GB"
    assert short_name("NVIDIA GeForce RTX 4090") == "GeForce"
    assert short_name("Tesla") == "Tesla"


def test_cpu_line_shows_the_total_and_a_glyph_per_core():
    colors = {"accent": "", "warning": "", "error": "", "foreground-muted": ""}
    line = cpu_line((0.0, 100.0, 50.0, 50.0), colors, 80).plain
    assert line.startswith("host CPU") and "50%" in line and line.endswith("4 cores ▁█▅▅")
    assert cpu_line(tuple([10.0] * 256), colors, 80).cell_len <= 80
