"""Which tracker run an attempt logs to (lat_core/train/tracker_run.py): the job's kept run when it
resumes, a new one otherwise, and the logs a continued run already holds."""
import json

import pytest

from lat_core.contract.jobdir import TRACKER_RUN, JobDir
from lat_core.train.events import EventWriter
from lat_core.train.tracker_run import EVENT, SkipHeld, TrackerRun, held_steps, log_kind, open_tracker_run


def test_the_job_folder_keeps_one_valid_run_id(tmp_path):
    folder = JobDir(tmp_path)
    assert folder.tracker_run_id() is None
    folder.write_tracker_run_id("3f2a_b-9")
    assert folder.tracker_run_id() == "3f2a_b-9"
    assert json.loads((tmp_path / TRACKER_RUN).read_text()) == {"id": "3f2a_b-9"}
    for bad in ("{", "[1]", '{"id": 7}', '{"id": "../x"}', '{"id": ""}', json.dumps({"id": "x" * 65})):
        (tmp_path / TRACKER_RUN).write_text(bad)
        assert folder.tracker_run_id() is None, bad   # the next attempt then starts a new run
    with pytest.raises(ValueError):
        folder.write_tracker_run_id("a b")


def _attempt(events: EventWriter, run: TrackerRun | None, steps, evals=()) -> None:
    events.emit("started")
    if run is not None:
        events.emit(EVENT, **run.event(["wandb"]))
    for step in steps:
        events.emit("step", step=step, loss=1.0)
    for step in evals:
        events.emit("eval", step=step, split="validation", metrics={})


def test_a_resume_continues_the_kept_run_and_a_fresh_start_makes_a_new_one(tmp_path):
    first = open_tracker_run(tmp_path, resume=True)            # nothing kept: a new run even on resume
    assert not first.continued and first.replaced is None and JobDir(tmp_path).tracker_run_id() == first.id
    with EventWriter(tmp_path / "events.jsonl") as events:
        _attempt(events, first, [1, 2, 3, 4, 5], evals=[3])
    again = open_tracker_run(tmp_path, resume=True)
    assert (again.id, again.continued, again.held) == (first.id, True, {"step": 5, "eval": 3})
    fresh = open_tracker_run(tmp_path, resume=False)
    assert not fresh.continued and fresh.replaced == first.id and fresh.id != first.id
    assert JobDir(tmp_path).tracker_run_id() == fresh.id


def test_held_steps_count_the_attempts_that_logged_to_the_current_run(tmp_path):
    path = tmp_path / "events.jsonl"
    old, new = TrackerRun("old", False), TrackerRun("new", False)
    with EventWriter(path) as events:
        _attempt(events, old, [1, 2, 3, 4, 5, 6, 7, 8], evals=[4, 8])   # an earlier run: not this one's
        _attempt(events, new, [1, 2, 3], evals=[2])
        _attempt(events, None, [3, 4, 5, 6, 7])                         # resumed without trackers: sent nothing
        _attempt(events, TrackerRun("new", True), [3, 4])
    assert held_steps(path) == {"step": 4, "eval": 2}
    assert held_steps(tmp_path / "absent.jsonl") == {}


def test_a_continued_run_skips_only_what_it_holds():
    run = TrackerRun("r", True, held={"step": 5, "eval": 3})
    assert log_kind({"loss": 1.0, "learning_rate": 1e-3}) == "step"
    assert log_kind({"eval_validation_accuracy": 0.5, "epoch": 1}) == "eval"
    assert log_kind({"train_runtime": 1.0, "train_loss": 2.0}) is None
    assert run.holds(5, {"loss": 1.0}) and not run.holds(6, {"loss": 1.0})
    assert run.holds(3, {"eval_validation_loss": 1.0}) and not run.holds(4, {"eval_validation_loss": 1.0})
    assert not run.holds(5, {"train_runtime": 1.0})     # the summary is always sent
    seen = []

    class Tracker:
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.append((state.global_step, dict(logs)))

        def on_train_begin(self, *args, **kwargs):
            seen.append("begin")

    class State:
        global_step = 0

    wrapped, state = SkipHeld(Tracker(), run), State()
    wrapped.on_train_begin(None, state, None)
    for state.global_step, logs in ((5, {"loss": 1.0}), (5, {"eval_x": 1.0}), (6, {"loss": 2.0})):
        wrapped.on_log(None, state, None, logs=logs)
    assert seen == ["begin", (5, {"eval_x": 1.0}), (6, {"loss": 2.0})]


def test_the_run_id_goes_where_wandb_and_swanlab_resume_from():
    run = TrackerRun("abc", True)
    assert run.environ(["tensorboard", "wandb", "swanlab"]) == {
        "WANDB_RUN_ID": "abc", "WANDB_RESUME": "allow", "SWANLAB_RUN_ID": "abc", "SWANLAB_RESUME": "allow"}
    assert run.environ(["tensorboard"]) == {}
    assert "continued" in run.line(["wandb"]) and "a new run" in TrackerRun("n", False, replaced="abc").line(["wandb"])


def test_trackers_open_the_jobs_run_only_when_one_is_active(tmp_path, monkeypatch):
    from tests.unit.train.test_tracking_names import _cfg
    from lat_core.train import tracking
    monkeypatch.setattr(tracking, "_require", lambda module, why: None)   # wandb counts as installed
    env = {"WANDB_RUN_ID": "the-users"}
    run = tracking.Trackers(_cfg(tmp_path, ["wandb"]), print, environ=env).open_run(tmp_path, resume=False)
    assert env["WANDB_RUN_ID"] == run.id == JobDir(tmp_path).tracker_run_id() and env["WANDB_RESUME"] == "allow"
    assert tracking.Trackers(_cfg(tmp_path / "b", []), print, environ={}).open_run(tmp_path / "b", resume=False) is None
    assert JobDir(tmp_path / "b").tracker_run_id() is None
