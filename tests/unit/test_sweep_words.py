"""The plan form's Sweep words (lat_tui.sweep_words), apart from the form: a last run's sweep reads
back as the words that make it, and its two-stage search is kept beside them."""

import yaml

from lat_core.contract.saved_plan import SavedPlan
from lat_tui import sweep_words
from lat_tui.plan_form import EMPTY_FORM, form_from_saved_plan, form_to_mapping

SWEEP = {"grid": {"train.lr": [0.0001, 0.0002], "peft.r": [8, 16]}, "zip": {"HP_MAX_STEPS": [40, 80]},
         "random": {"n": 4, "seed": 0, "space": {"train.lr": {"log_uniform": [1.0e-5, 0.001]}, "peft.alpha": [8, 16]}}}


def test_a_sweep_reads_back_as_the_words_that_make_it():
    text = sweep_words.to_text(SWEEP)
    assert text == ("train.lr=1e-4,2e-4 peft.r=8,16 zip:HP_MAX_STEPS=40,80 "
                    "random:train.lr=log_uniform:1e-5,1e-3 random:peft.alpha=8,16 draws=4 seed=0")
    assert sweep_words.to_mapping(sweep_words.from_text(text), dict.fromkeys(("grid", "zip", "random", "draws"), "x")) == (
        SWEEP, [])


def test_a_last_runs_two_stage_search_is_kept_with_the_points_the_field_holds():
    stages = {"screen": {"train.max_steps": 10}, "promote": 1}
    plan = SavedPlan.from_text(yaml.safe_dump({"suites": [{"name": "demo"}], "pairs": ["1:tiny-sst2"], "gpus": "cpu",
                                               "sweep": {"grid": {"train.lr": [0.0001, 0.0002]}, "stages": stages}}))
    form = form_from_saved_plan(plan)
    assert (form.sweep, dict(form.sweep_search)) == ("train.lr=1e-4,2e-4", {"stages": stages})
    mapping, problems = form_to_mapping(form)
    assert problems == [] and mapping["sweep"] == {"grid": {"train.lr": [0.0001, 0.0002]}, "stages": stages}
    assert "sweep" not in form_to_mapping(EMPTY_FORM)[0]
