"""Jobs that wait for others' success (``after:``, ``--after``): the engine keeps such a job queued,
saying which job it waits for, starts it once its parent succeeded, and cancels it (and what waits
for it) with the reason when its parent fails or is cancelled. Real engine, real fake trainers."""

from lat_core.contract.commands import CancelJob
from lat_core.engine.loop import Engine
from tests.conftest import fake_job, intervals
from tests.integration.test_control import tick_until
from tests.integration.test_engine import drain, make_run


def test_a_dependent_job_waits_for_its_parents_success_then_runs(tmp_path):
    release = tmp_path / "release"
    parent = fake_job(tmp_path, "parent", extra=("--wait-for", str(release)))
    child = {**fake_job(tmp_path, "child"), "after_keys": ["parent"]}
    store, run_id = make_run(tmp_path, [child, parent])  # listed first: order is not what makes it wait
    child_id, parent_id = (j.id for j in store.jobs(run_id))
    engine = Engine(store)
    tick_until(engine, lambda: store.job(parent_id).state == "running")
    engine.tick()  # a free slot (2 on the CPU), and still the child waits
    assert store.job(child_id).state == "queued" and store.job(child_id).after == (parent_id,)
    assert store.job(child_id).waiting == f"waiting for job {parent_id} (parent) to succeed"
    release.touch()
    drain(store)
    assert [j.state for j in store.jobs(run_id)] == ["succeeded", "succeeded"]
    spans = intervals(tmp_path)
    assert spans["child"][0] >= spans["parent"][1]


def test_a_failed_parent_cancels_what_waits_for_it_and_what_waits_for_that(tmp_path):
    jobs = [fake_job(tmp_path, "parent", exit_code=3), {**fake_job(tmp_path, "child"), "after_keys": ["parent"]},
            {**fake_job(tmp_path, "grandchild"), "after_keys": ["child"]}, fake_job(tmp_path, "other")]
    store, run_id = make_run(tmp_path, jobs)
    drain(store)
    parent, child, grandchild, other = store.jobs(run_id)
    assert [j.state for j in (parent, child, grandchild, other)] == ["failed", "cancelled", "cancelled", "succeeded"]
    assert child.error == f"job {parent.id} (parent) failed: this job was to run after its success"
    assert grandchild.error == f"job {child.id} (child) cancelled: this job was to run after its success"
    assert not (tmp_path / "record" / "child.log").exists()  # never started
    assert store.run(run_id).state == "finished"


def test_a_job_of_another_run_can_be_waited_for_and_its_cancel_cancels(tmp_path):
    release = tmp_path / "release"
    store, first = make_run(tmp_path, [fake_job(tmp_path, "parent", extra=("--wait-for", str(release)))])
    parent_id = store.jobs(first)[0].id
    second = store.create_run("plan: test", str(tmp_path / "out"), [{"id": "cpu", "label": "cpu", "slots": 1,
                                                                      "env": {}}], 0.0)
    store.add_jobs(second, [{**fake_job(tmp_path, "child"), "after_ids": [parent_id]}])
    engine = Engine(store)
    tick_until(engine, lambda: store.job(parent_id).state == "running")
    store.add_command(first, CancelJob(parent_id))
    drain(store)
    child = store.jobs(second)[0]
    assert child.state == "cancelled" and child.error.startswith(f"job {parent_id} (parent) cancelled")


def test_slot_reasons_do_not_hide_what_a_dependent_waits_for(tmp_path):
    release = tmp_path / "release"
    parent = fake_job(tmp_path, "parent", extra=("--wait-for", str(release)))
    store, run_id = make_run(tmp_path, [parent, {**fake_job(tmp_path, "child"), "after_keys": ["parent"]},
                                        fake_job(tmp_path, "free", extra=("--wait-for", str(release))),
                                        fake_job(tmp_path, "last")])
    engine = Engine(store)
    tick_until(engine, lambda: [j.state for j in store.jobs(run_id)][2] == "running")
    engine.tick()  # both slots taken
    _, child, _, last = store.jobs(run_id)
    assert child.waiting.startswith("waiting for job") and last.waiting == "no free slot on cpu"
    release.touch()
    drain(store)
    assert {j.state for j in store.jobs(run_id)} == {"succeeded"}
