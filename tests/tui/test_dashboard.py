"""The dashboard at 80x24, fed through the journal API as the engine would write it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from textual.css.query import NoMatches
from textual.geometry import Region
from textual.widgets import Log
from textual.widgets.data_table import CellDoesNotExist

from lat_core.contract.commands import CancelJob, CancelRun, SkipCountdown
from lat_tui.screens.dashboard import DashboardScreen
from lat_tui.widgets.job_detail import JobDetail
from lat_tui.widgets.job_table import JobTable
from lat_tui.widgets.status import RunStatus
from tests.helpers.waits import HANG_S

SIZE = (80, 24)
PLAN_YAML = "suites: [{name: demo, rounds: all}]\npairs: ['1:tiny-sst2']\nenv: {NUM_DATA_WORKERS: '0'}\n"


def make_run(store, root: Path, keys=("tiny-sst2_seed1/a", "tiny-sst2_seed2/a"), countdown: float = 0.0):
    # a real run's saved plan names its output root: jobs added to it go there, not to ./runs
    plan_yaml = f"{PLAN_YAML}output_root: {json.dumps(str(root))}\n"
    run_id = store.create_run(plan_yaml, str(root), [{"id": "cpu", "label": "cpu", "slots": 2, "env": {}}],
                              time.time() + countdown)
    jobs = []
    for n, key in enumerate(keys, start=1):
        job_dir = root / key
        job_dir.mkdir(parents=True)
        dataset, stem = key.split("/", 1)
        jobs.append({"key": key, "suite": "demo", "round": 1, "stem": stem, "seed": n,
                     "dataset": dataset.rsplit("_seed", 1)[0],
                     "job_dir": str(job_dir), "argv": [], "env": {}})
    return run_id, store.add_jobs(run_id, jobs)


async def wait_for(pilot, predicate, timeout: float = HANG_S) -> None:
    """Until ``predicate()`` holds; the limit only catches a hang (a loaded host polls and draws late)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (NoMatches, CellDoesNotExist):  # a screen or a table row not drawn yet: on a later frame
            pass
        await pilot.pause(0.1)
    raise AssertionError("condition not met in time")


def cell(app, job_id: int, column: str) -> str:
    return str(app.screen.query_one(JobTable).get_cell(str(job_id), column))


def log_lines(app) -> list[str]:
    return list(app.screen.query_one("#job-log", Log).lines)


def monitor_text(app) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query("#monitor Static"))


def text_of(app, widget_type) -> str:
    return str(app.screen.query_one(widget_type).render())


async def test_reattaches_to_latest_run_and_shows_jobs(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out")
    app = make_app(gpus=2)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count == 2)
        assert cell(app, first, "state") == "queued"
        assert f"run {run_id}" in text_of(app, RunStatus)
        await wait_for(pilot, lambda: "GPU1" in monitor_text(app))
        devices = monitor_text(app)
        assert "GPU0 H100 80GB" in devices and "0.0/80G" in devices and "RAM" in devices


async def test_table_and_log_follow_the_journal(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out")
    log_path = tmp_path / "out" / "tiny-sst2_seed1/a" / "train.log"
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count == 2)
        journal.set_run_state(run_id, "running")
        journal.set_job_state(first, "running", device="cpu", started=time.time() - 65, attempts=1)
        journal.set_progress(first, 20, 1.23456)
        log_path.write_text("loading model\nstep 20/40 loss 1.2346\n")
        await wait_for(pilot, lambda: cell(app, first, "state") == "running")
        await wait_for(pilot, lambda: cell(app, first, "loss") == "1.2346")
        assert cell(app, first, "step") == "20"
        assert cell(app, first, "device") == "cpu"
        assert cell(app, first, "elapsed").startswith("01:0")
        await wait_for(pilot, lambda: log_lines(app) == ["loading model", "step 20/40 loss 1.2346"])
        with log_path.open("a") as fh:
            fh.write("step 25/40 loss 1.1\nhalf a li")
        await wait_for(pilot, lambda: log_lines(app)[-1] == "step 25/40 loss 1.1")
        with log_path.open("a") as fh:
            fh.write("ne\n")
        await wait_for(pilot, lambda: log_lines(app)[-1] == "half a line")
        assert "1 running" in text_of(app, RunStatus)


async def test_selecting_another_job_switches_the_log(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out")
    (tmp_path / "out" / "tiny-sst2_seed1/a" / "train.log").write_text("first job\n")
    (tmp_path / "out" / "tiny-sst2_seed2/a" / "train.log").write_text("second job\n")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: log_lines(app) == ["first job"])
        await pilot.press("down")
        await wait_for(pilot, lambda: log_lines(app) == ["second job"])
        assert str(app.screen.query_one("#job-log", Log).border_title) == "log · a 2:tiny-sst2"  # the table's name


async def test_failed_job_shows_its_error(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out")
    journal.set_job_state(first, "failed", returncode=1, error="CUDA out of memory (exit 1)", attempts=2)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "CUDA out of memory" in text_of(app, JobDetail))
        assert cell(app, first, "state") == "failed"
        assert "failed · exit 1 · attempt 2" in text_of(app, JobDetail)  # 80 columns have no try column
        detail = app.screen.query_one(JobDetail)
        assert detail.has_class("-error") and detail.region.height >= 2
    async with make_app().run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: pilot.app.screen.query_one(JobTable).row_count == 2)
        assert cell(pilot.app, first, "attempts") == "2"


async def test_countdown_keys_send_commands(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out", countdown=600)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "starts in" in text_of(app, RunStatus))
        await pilot.press("s", "c")
        await pilot.press("C")
        assert [c.command for c in journal.pending_commands(run_id)] == [SkipCountdown(), CancelJob(first)]
        await pilot.press("C")  # the second press confirms
    assert [c.command for c in journal.pending_commands(run_id)] == [SkipCountdown(), CancelJob(first), CancelRun()]


async def test_finished_run_refuses_commands(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out")
    for job_id in (first, second):  # a run with jobs still queued reads "requeued", not "finished"
        journal.set_job_state(job_id, "succeeded", "done")
    journal.set_run_state(run_id, "finished")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "finished" in text_of(app, RunStatus))
        await pilot.press("s", "c", "C", "C")
    assert journal.pending_commands(run_id) == []


async def test_reattach_restarts_a_dead_engine_once(make_app, journal, tmp_path, engine_spy, state_dir):
    make_run(journal, tmp_path / "out")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: engine_spy.calls)
        await pilot.pause(1.5)
    assert engine_spy.calls == [(state_dir, {"NUM_DATA_WORKERS": "0"})]


async def test_layout_fits_80x24(make_app, journal, tmp_path):
    keys = [f"tiny-sst2_seed{n}/a_rather_long_config_name_for_the_table" for n in range(1, 16)]
    make_run(journal, tmp_path / "out", keys=keys)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count == 15)
        await pilot.pause(0.3)
        screen = app.screen
        table, log = screen.query_one(JobTable), screen.query_one("#job-log", Log)
        assert table.region.height >= 6 and log.region.height >= 5
        assert log.region.bottom <= 23 and table.region.right <= 80
        assert screen.query_one(RunStatus).region.y == 0


async def test_n_opens_plan_and_a_new_run_replaces_the_shown_one(make_app, journal, tmp_path):
    run_id, _ = make_run(journal, tmp_path / "out")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count == 2)
        await pilot.press("n")  # the last run's suite is picked already
        assert app.screen.query_one("#suites").selected == ["demo"]
        app.screen.query_one("#pairs").value = "7:tiny-sst2"
        app.screen.query_one("#output").value = str(tmp_path / "new")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.run_id == run_id + 1)
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count == 1)
        assert len(app.screen_stack) == 2


def test_a_job_held_back_for_memory_says_why():
    from lat_core.contract.rows import JobRow
    from lat_tui.widgets.job_detail import describe_job

    job = JobRow(1, 1, 1, "d_seed1/a", "s", 1, "a", 1, "d", "/o/a", "queued", None, 0, None, None, None,
                 None, None, None, argv=[], env={}, waiting="needs 10.0G GPU memory, 3.0G free on gpu0")
    assert "waiting: needs 10.0G GPU memory, 3.0G free on gpu0" in describe_job(job, "a 1:d").plain


async def test_job_names_say_model_config_seed_and_dataset(make_app, journal, tmp_path):
    run_id, (first, second) = make_run(journal, tmp_path / "out", keys=("tiny-sst2_seed1/tiny_lora",
                                                                         "tiny-sst2_seed2/tiny_lora"))
    (tmp_path / "out" / "tiny-sst2_seed1/tiny_lora" / "job.yaml").write_text("model: {family: mamba}\n")
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count == 2)
        await wait_for(pilot, lambda: cell(app, first, "key") == "mamba/tiny_lora 1:tiny-sst2")
        assert cell(app, second, "key") == "tiny_lora 2:tiny-sst2"  # no job.yaml (yet): no family


def screen_lines(widget) -> list[str]:
    """What ``widget`` shows on screen, line by line, as a person reads it."""
    return [strip.text for strip in widget.render_lines(Region(0, 0, *widget.region.size))]


async def test_at_80_columns_names_tell_datasets_and_configs_apart(make_app, journal, tmp_path):
    """Two datasets and configs that share their start: the 18 cells of the job column keep what
    differs (``…lora_qkvo 1:cola``, not ``t…vo 1:glue…``), and a waiting reason wider than the screen
    ends in a mark instead of going on below the detail line."""
    keys = ("glue-tvt_cola_seed1/tiny_lora_qkvo", "glue-tvt_rte_seed2/tiny_lora_q", "glue-tvt_cola_seed3/tiny_dora_qkvo")
    run_id, jobs = make_run(journal, tmp_path / "out", keys=keys)
    journal.set_waiting(jobs[0], "needs 10.0G GPU memory, 3.0G free on gpu0; " * 5)
    wide = ["tiny_lora_qkvo 1:glue-tvt_cola", "tiny_lora_q 2:glue-tvt_rte", "tiny_dora_qkvo 3:glue-tvt_cola"]
    for size, names in (((80, 24), ["…lora_qkvo 1:cola", "…lora_q 2:rte", "…dora_qkvo 3:cola"]), ((160, 48), wide)):
        app = make_app()
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: app.screen.query_one(JobTable).row_count == 3)
            assert [cell(app, job, "key") for job in jobs] == names
            await wait_for(pilot, lambda: "waiting" in text_of(app, JobDetail))
            await pilot.pause(0.2)
            waiting_line = next(line for line in screen_lines(app.screen.query_one(JobDetail)) if "waiting" in line)
            assert waiting_line.rstrip().endswith("…"), waiting_line
