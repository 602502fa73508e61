"""A two-stage search in the engine: the stage-2 jobs are held until every stage-1 job of their
search has ended (a failed one ranks last and does not stop stage 2), then the ``promote`` points
whose stage-1 job scored best run and the others are pruned, with the ranking in the run's history
and the reason in each pruned job's row and folder. Real engine, real fake trainers."""

from pathlib import Path

from lat_core.contract.commands import RequeueJob
from lat_core.contract.jobdir import JobDir
from lat_core.contract.states import HistoryKind
from lat_core.contract.sweep_roles import Stage, SweepRole
from lat_core.engine.loop import Engine
from lat_core.results.scan import Skipped, scan_job
from tests.conftest import fake_job, intervals
from tests.integration.test_cli_verbs import lat
from tests.integration.test_control import tick_until
from tests.integration.test_engine import drain, make_run

SEARCH = "demo/1/tiny_lora/tiny-sst2"
# point -> its stage-1 accuracies (one eval a step); "fails": its screening job exits 3
SCREEN = {"lr1e-4": "0.50,0.55,0.60", "lr2e-4": "0.60,0.80,0.70", "lr5e-4": "fails", "lr1e-3": "0.62,0.66,0.78"}


def screen_job(tmp_path, i, point, evals, wait=()):
    told = () if evals == "fails" else ("--evals", f"accuracy={evals}")
    job = fake_job(tmp_path, f"{point}__screen", exit_code=3 if evals == "fails" else 0, extra=(*told, *wait))
    return {**job, "sweep": SweepRole(i, point, SEARCH, Stage.SCREEN)}


def full_job(tmp_path, i, point, seed, promote=2):
    return {**fake_job(tmp_path, f"{point}_seed{seed}"), "seed": seed,
            "sweep": SweepRole(i, point, SEARCH, Stage.FULL, promote)}


def search_jobs(tmp_path, release=None):
    wait = ("--wait-for", str(release)) if release else ()
    screen = [screen_job(tmp_path, i, p, e, wait if i == 0 else ()) for i, (p, e) in enumerate(SCREEN.items())]
    full = [full_job(tmp_path, i, p, seed) for i, p in enumerate(SCREEN) for seed in (1, 2)]
    return screen + full


def test_stage_2_runs_the_best_points_in_full_and_prunes_the_others(tmp_path):
    store, run_id = make_run(tmp_path, search_jobs(tmp_path))
    drain(store)
    states = {j.key: j.state for j in store.jobs(run_id)}
    assert states == {
        "lr1e-4__screen": "succeeded", "lr2e-4__screen": "succeeded", "lr5e-4__screen": "failed",
        "lr1e-3__screen": "succeeded",
        "lr1e-4_seed1": "pruned", "lr1e-4_seed2": "pruned", "lr2e-4_seed1": "succeeded", "lr2e-4_seed2": "succeeded",
        "lr5e-4_seed1": "pruned", "lr5e-4_seed2": "pruned", "lr1e-3_seed1": "succeeded", "lr1e-3_seed2": "succeeded"}
    spans = intervals(tmp_path)
    last_screen_end = max(end for name, (_, end) in spans.items() if name.endswith("__screen"))
    assert all(start >= last_screen_end for name, (start, _) in spans.items() if "_seed" in name)
    assert not (tmp_path / "record" / "lr1e-4_seed1.log").exists()  # a pruned point never starts
    history = [t.detail for t in store.transitions(run_id) if t.job_id is None and t.new_state == HistoryKind.SWEEP]
    assert history == [f"stage 1 of {SEARCH} ended, ranked by the best validation accuracy: promoted "
                       "lr2e-4 (accuracy 0.8), lr1e-3 (accuracy 0.78); not promoted lr1e-4 (accuracy 0.6), "
                       f"lr5e-4 (failed, no accuracy)"]
    pruned = next(j for j in store.jobs(run_id) if j.key == "lr5e-4_seed1")
    assert pruned.error == ("not promoted by stage 1 of its sweep: lr5e-4 (failed, no accuracy) ranked 4 of 4; "
                            "the 2 best went on (the last of them lr1e-3 (accuracy 0.78))")
    assert JobDir(pruned.job_dir).pruned_reason() == pruned.error
    told = scan_job(Path(pruned.job_dir))  # results tell
    assert isinstance(told, Skipped) and (told.reason, told.ended) == (f"pruned: {pruned.error}", "pruned")
    promoted = next(j for j in store.jobs(run_id) if j.key == "lr1e-3_seed2")
    said = [t.detail for t in store.transitions(run_id, job_id=promoted.id) if t.new_state == HistoryKind.SWEEP]
    assert said == ["promoted by stage 1 of its sweep: 1. lr2e-4 (accuracy 0.8), 2. lr1e-3 (accuracy 0.78) of 4 points"]
    assert store.run(run_id).state == "finished" and store.held_jobs(run_id) == []
    ended = [t.detail for t in store.transitions(run_id) if t.job_id is None and t.new_state == "finished"]
    assert ended == ["7 succeeded, 4 pruned by the sweep, 1 not"]


def test_a_pruned_point_requeued_by_hand_runs_and_no_longer_says_it_was_pruned(tmp_path):
    store, run_id = make_run(tmp_path, search_jobs(tmp_path))
    drain(store)
    pruned = next(j for j in store.jobs(run_id) if j.key == "lr1e-4_seed1")
    store.add_command(run_id, RequeueJob(pruned.id))
    drain(store)
    assert store.job(pruned.id).state == "succeeded" and JobDir(pruned.job_dir).pruned_reason() is None
    assert len([t for t in store.transitions(run_id) if t.new_state == HistoryKind.SWEEP and t.job_id is None]) == 1


def test_stage_2_waits_for_the_last_screening_job_saying_so(tmp_path):
    release = tmp_path / "release"
    store, run_id = make_run(tmp_path, search_jobs(tmp_path, release))
    engine = Engine(store)
    tick_until(engine, lambda: sum(j.state == "succeeded" or j.state == "failed" for j in store.jobs(run_id)) == 3)
    engine.tick()  # a slot is free, and still no stage-2 job starts
    full = [j for j in store.jobs(run_id) if "_seed" in j.key]
    assert {j.state for j in full} == {"queued"}
    assert {j.waiting for j in full} == {"waiting for stage 1 of its sweep: 1 of 4 screening jobs still to end"}
    release.touch()
    drain(store)
    assert [j.state for j in store.jobs(run_id)].count("pruned") == 4


def test_wait_exits_0_when_the_only_jobs_not_succeeded_are_pruned(tmp_path):
    points = {"lrA": "0.9,0.9,0.9", "lrB": "0.5,0.6,0.7"}
    jobs = [screen_job(tmp_path, i, p, e) for i, (p, e) in enumerate(points.items())]
    store, run_id = make_run(tmp_path, jobs + [full_job(tmp_path, i, p, 1, promote=1) for i, p in enumerate(points)])
    drain(store)
    out = lat(tmp_path / "state", "wait")
    assert out.returncode == 0 and out.stdout.startswith("3/4 jobs succeeded, 1 pruned by the sweep"), out.stdout
