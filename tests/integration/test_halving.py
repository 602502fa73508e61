"""Successive halving in the engine: the jobs of a race are judged at each rung against the earlier
points of the sweep that race there; a job behind is stopped and ends ``pruned`` (its reason in its
row and folder, results name it), the others train on. Real engine, real fake trainers that hold at
their end until the test releases them, so every job is still running when it is judged."""

from pathlib import Path

from lat_core.contract.jobdir import JobDir
from lat_core.contract.sweep_roles import Stage, SweepRole
from lat_core.engine.loop import Engine
from lat_core.results.scan import Skipped, scan_job
from tests.conftest import fake_job
from tests.integration.test_control import tick_until
from tests.integration.test_engine import drain, make_run
from tests.integration.test_engine_fused import LONG, base, by_key, stepped  # noqa: F401  (base: a fixture)
from tests.integration.test_engine_fused import drain as fused_drain
from tests.integration.test_engine_fused import make_run as fused_run

RACE = "demo/1/tiny_lora/tiny-sst2/seed1/only"
FOUR_SLOTS = {"id": "cpu", "label": "cpu", "slots": 4, "env": {}}


def racing_job(tmp_path, i, point, accuracies, release, rungs=(2,)):
    job = fake_job(tmp_path, point, sleep=0.0, extra=("--steps", "4", "--evals", f"accuracy={accuracies}",
                                                      "--wait-for", str(release)))
    role = SweepRole(i, point, "demo/1/tiny_lora/tiny-sst2", Stage.ONLY, race=RACE, rungs=rungs, eta=2)
    return {**job, "sweep": role}


def race(tmp_path, points, pruned, rungs=(2,)):
    """Run the race until every job logged its evals and the ``pruned`` jobs the engine stopped have
    ended (a release before their stop landed could let them finish), then release the others;
    returns the jobs by name."""
    release = tmp_path / "release"
    store, run_id = make_run(tmp_path, [racing_job(tmp_path, i, p, a, release, rungs) for i, (p, a) in
                                        enumerate(points.items())], devices=(FOUR_SLOTS,))
    engine = Engine(store)
    logged = [tmp_path / "out" / p / "events.jsonl" for p in points]
    tick_until(engine, lambda: all(f.exists() and f.read_text().count('"eval"') == 4 for f in logged))
    tick_until(engine, lambda: [j.state for j in store.jobs(run_id)].count("pruned") == pruned)
    release.touch()
    drain(store)
    return {j.key: j for j in store.jobs(run_id)}


def test_a_point_behind_the_earlier_ones_at_a_rung_is_stopped_and_pruned(tmp_path):
    jobs = race(tmp_path, {"p0": "0.5,0.6,0.7,0.8",     # the first point always goes on
                           "p1": "0.4,0.5,0.9,0.9",     # 0.5 < p0's 0.6: the best 1 of 2 goes on
                           "p2": "0.7,0.65,0.7,0.7",    # its best so far 0.7: first of 3, the best 2 go on
                           "p3": "0.3,0.6,0.9,0.9"},    # 0.6 ties p0 (the earlier wins) and trails p2
                pruned=2)
    assert {k: j.state for k, j in jobs.items()} == {"p0": "succeeded", "p1": "pruned", "p2": "succeeded",
                                                     "p3": "pruned"}
    assert jobs["p1"].error == ("stopped by the sweep's halving at rung 1 (step 2): p1 accuracy 0.5 was behind 1 "
                                "of the 1 earlier points racing there (the best p0 0.6); the best 1 of 2 go on")
    assert jobs["p3"].error.startswith("stopped by the sweep's halving at rung 1 (step 2): p3 accuracy 0.6 was "
                                       "behind 2 of the 3 earlier points racing there (the best p2 0.7)")
    folder = Path(jobs["p3"].job_dir)
    assert JobDir(folder).pruned_reason() == jobs["p3"].error
    assert jobs["p3"].error in (folder / "train.log").read_text().splitlines()[-1]  # its log's closing line
    told = scan_job(folder)
    assert isinstance(told, Skipped) and (told.reason, told.ended) == (f"pruned: {jobs['p3'].error}", "pruned")


def test_a_point_stopped_at_a_rung_never_races_at_a_later_one(tmp_path):
    # rungs 2 and 4, eta 2. At 2: p1 (0.5) is behind p0 (0.6) and stops, though its trainer went on
    # to log 0.95 at step 4 before the stop landed. At 4 p2 races against p0 alone (0.8 > 0.7 of p2): behind
    # 1 of 1, so it stops; had p1 counted, p2 would have been behind 2 of 2 with the best 2 of 3 kept.
    jobs = race(tmp_path, {"p0": "0.5,0.6,0.7,0.8", "p1": "0.4,0.5,0.9,0.95", "p2": "0.7,0.7,0.7,0.7"},
                pruned=2, rungs=(2, 4))
    assert {k: j.state for k, j in jobs.items()} == {"p0": "succeeded", "p1": "pruned", "p2": "pruned"}
    assert jobs["p2"].error == ("stopped by the sweep's halving at rung 2 (step 4): p2 accuracy 0.7 was behind 1 "
                                "of the 1 earlier points racing there (the best p0 0.8); the best 1 of 2 go on")


def test_a_fused_member_stopped_by_the_sweep_ends_pruned_alone(tmp_path, base):
    """The stop is a cancel with the sweep's reason: a fused member leaves its group by its marker."""
    store, run_id = fused_run(tmp_path, base, "true", b=LONG)
    engine = Engine(store)
    fused_drain(engine, until=lambda: stepped(by_key(store, run_id)["b"]))
    engine.stop_pruned(by_key(store, run_id)["b"], "behind the others")
    fused_drain(engine)
    jobs = by_key(store, run_id)
    assert {k: j.state for k, j in jobs.items()} == {"a": "succeeded", "b": "pruned", "c": "succeeded"}
    assert jobs["b"].error == "behind the others" and jobs["b"].fused_group and jobs["b"].last_step < 400
    assert JobDir(jobs["b"].job_dir).pruned_reason() == "behind the others"
