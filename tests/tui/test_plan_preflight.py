"""The preflight's refusal in the TUI's plan form: the same lines as on the command line, no run."""

from __future__ import annotations

import json

from textual.widgets import Input, SelectionList, Static

from lat_core.front.service import open_store
from lat_tui.screens.plan import PlanScreen

SIZE = (80, 24)


def big_model_suite(configs_dir, tmp_path) -> None:
    big = tmp_path / "gla13b"
    big.mkdir()
    (big / "config.json").write_text(json.dumps({"hidden_size": 2048, "num_hidden_layers": 24}))
    experiment = configs_dir / "experiments" / "a.yaml"
    experiment.write_text(experiment.read_text().replace(
        "name_or_path: tiny-random, tiny: {hidden_size: 64, num_hidden_layers: 2, num_heads: 2}",
        f"name_or_path: {big}, dtype: bfloat16"))


async def test_a_big_model_on_the_cpu_is_refused_in_the_form(make_app, configs_dir, state_dir, tmp_path):
    big_model_suite(configs_dir, tmp_path)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one("#suites", SelectionList).select_all()
        app.screen.query_one("#pairs", Input).value = "1:tiny-sst2"
        app.screen.query_one("#output", Input).value = str(tmp_path / "out")
        await pilot.pause()
        await pilot.press("ctrl+s")
        box = app.screen.query_one("#problems", Static)
        for _ in range(100):
            if "The run cannot work" in str(box.render()):
                break
            await pilot.pause(0.1)
        text = str(box.render())
    assert "The run cannot work" in text and "need a GPU, and the run is on the CPU" in text, text
    store = open_store(state_dir)
    try:
        assert store.runs() == []
    finally:
        store.close()
    assert not (tmp_path / "out").exists()


async def test_allow_cpu_in_the_form_lifts_the_cpu_refusal_as_allow_cpu_does(make_app, configs_dir, state_dir,
                                                                              tmp_path):
    """Only the CPU refusal: whether the model's estimated peak fits this host's RAM is the
    machine's business, so the run may start or be refused for memory."""
    big_model_suite(configs_dir, tmp_path)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one("#suites", SelectionList).select_all()
        app.screen.query_one("#switches", SelectionList).select("allow_cpu")
        app.screen.query_one("#pairs", Input).value = "1:tiny-sst2"
        app.screen.query_one("#output", Input).value = str(tmp_path / "out")
        await pilot.pause()
        await pilot.press("ctrl+s")
        text = ""
        for _ in range(100):
            if not isinstance(app.screen, PlanScreen):
                break
            text = str(app.screen.query_one("#problems", Static).render())
            if "checking" not in text:
                break
            await pilot.pause(0.1)
    assert "checking" not in text and "need a GPU" not in text, text
