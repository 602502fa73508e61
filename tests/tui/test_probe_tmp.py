from tests.tui.test_log_pane import finished_job_app, wait_for, log_lines
from tests.tui.test_dashboard import make_run
async def test_probe(make_app, journal, tmp_path):
    run_id, jobs = make_run(journal, tmp_path / "out")
    journal.set_run_state(run_id, "running")
    app = make_app(gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(1)
        print("FOOTER80", repr(pilot.app.export_screenshot()[:0]))
        from textual.widgets import Footer
        print([ (c.key_display if hasattr(c,'key_display') else '', str(c.render())) for c in app.screen.query_one(Footer).children])
        await pilot.press("question_mark")
        await pilot.pause(0.3)
        print(type(app.screen), [str(s.render())[:2000] for s in app.screen.query("Static")])
        assert 0
