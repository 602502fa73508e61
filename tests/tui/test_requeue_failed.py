"""``F`` on the dashboard: every failed and cancelled job of the run back to the queue, after a
confirmation that lists them and how each would start; one journal command for all."""

from __future__ import annotations

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from lat_core.contract.commands import RequeueJobs
from lat_tui.screens.dashboard import DashboardScreen
from lat_tui.screens.help import HelpScreen
from lat_tui.screens.requeue_failed import RequeueFailedConfirm

from .test_controls import fail, on_dashboard, sent
from .test_dashboard import SIZE, make_run, wait_for

KEYS = ("tiny-sst2_seed1/a", "tiny-sst2_seed2/a", "tiny-sst2_seed3/a")


def footer_keys(app) -> list[str]:
    """The keys the footer shows (r and F share the compact "Requeue" group)."""
    return [w.key for w in app.screen.query_one(Footer).walk_children() if isinstance(w, FooterKey)]


def modal_text(app) -> str:
    return " ".join(str(w.render()) for w in app.screen.query("Static"))


def ended_run_with_failures(journal, root):
    """A finished run: the first job failed (it left checkpoint-20), the second was cancelled, the
    third succeeded."""
    run_id, (first, second, third) = make_run(journal, root, keys=KEYS)
    fail(journal, first)
    checkpoint = root / KEYS[0] / "checkpoint-20"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "adapter_model.safetensors").write_bytes(b"weights")  # complete: contract.jobdir
    journal.set_job_state(second, "cancelled", error="cancelled by user")
    journal.set_job_state(third, "succeeded", returncode=0)
    journal.set_run_state(run_id, "finished")
    return run_id, (first, second, third)


async def test_the_key_asks_first_and_sends_one_command_for_every_failed_job(make_app, journal, tmp_path, engine_spy):
    run_id, (first, second, _) = ended_run_with_failures(journal, tmp_path / "out")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await on_dashboard(pilot, app, rows=3)
        await wait_for(pilot, lambda: "F" in footer_keys(app))
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, RequeueFailedConfirm))
        text = modal_text(app)
        assert "Requeue 2 failed or cancelled jobs" in text
        assert f"{first} a 1:tiny-sst2  failed: resume from checkpoint-20" in text  # the table's names
        assert f"{second} a 2:tiny-sst2  cancelled: fresh (no checkpoint)" in text and "a 3:tiny-sst2" not in text
        await pilot.press("escape")  # nothing is sent
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
        assert sent(journal, run_id) == []
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, RequeueFailedConfirm))
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, RequeueFailedConfirm))
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
        assert engine_spy.calls  # the run has ended: an engine is started to read the command
    assert sent(journal, run_id) == [RequeueJobs((first, second), start="resume"),
                                     RequeueJobs((first, second), start="fresh")]


async def test_a_run_without_failures_hides_the_key_and_help_lists_it(make_app, journal, tmp_path):
    run_id, (first, second, third) = make_run(journal, tmp_path / "out", keys=KEYS)
    for job in (first, second, third):
        journal.set_job_state(job, "succeeded", returncode=0)
    journal.set_run_state(run_id, "finished")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await on_dashboard(pilot, app, rows=3)
        await wait_for(pilot, lambda: "r" in footer_keys(app))  # r, for the selected ended job
        assert "F" not in footer_keys(app)
        await pilot.press("F")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen) and sent(journal, run_id) == []
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert "Requeue every failed and cancelled job of the run" in modal_text(app)


async def test_a_long_answer_is_cut_in_the_notification(make_app, journal, tmp_path, engine_spy):
    run_id, _ = ended_run_with_failures(journal, tmp_path / "out")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await on_dashboard(pilot, app, rows=3)
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, RequeueFailedConfirm))
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen))
        command = journal.pending_commands(run_id)[0]
        answer = "\n".join(["9 jobs requeued"] + [f"  {n} job{n}: fresh (no checkpoint)" for n in range(9)])
        journal.finish_command(command.id, "done", answer)
        await wait_for(pilot, lambda: any("requeue 2 failed jobs: done: 9 jobs requeued" in str(n.message)
                                          for n in app._notifications))
        shown, = [str(n.message) for n in app._notifications if "9 jobs requeued" in str(n.message)]
        assert shown.splitlines()[-2:] == ["  4 job4: fresh (no checkpoint)",
                                           "  ... 4 more (the run's history has them all)"]
