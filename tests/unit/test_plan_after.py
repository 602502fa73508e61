"""``after:`` in a plan: a suite entry's jobs wait for every job of the entries it names, the plan's
(``--after JOB``) for jobs of the state directory; what cannot work is a plan problem, exit 2."""

import sqlite3

import pytest

from lat_core.config.suites import SuiteRegistry
from lat_core.contract.journal import Store
from lat_core.errors import PlanError
from lat_core.front.jobs import expand
from lat_core.front.service import job_record
from tests.unit.test_jobs import make_plan
from tests.unit.test_plan import configs  # noqa: F401  (fixture)


def test_an_entry_waits_for_every_job_of_the_rounds_it_names(configs, tmp_path):
    plan = make_plan(configs, tmp_path, pairs=["1:glue-tvt_cola"],
                     suites=[{"name": "E4", "rounds": [2], "after": {"suite": "E4", "rounds": [1]}},
                             {"name": "E4", "rounds": [1]}, {"name": "demo", "after": ["E4"]}])
    jobs = {j.key: j for j in expand(plan, SuiteRegistry(configs))}
    round1 = ["glue-tvt_cola_seed1/a", "glue-tvt_cola_seed1/b"]
    assert jobs["glue-tvt_cola_seed1/c"].after_keys == round1 == jobs["glue-tvt_cola_seed1/c__rep2"].after_keys
    assert jobs["glue-tvt_cola_seed1/a"].after_keys == []
    assert jobs["glue-tvt_cola_seed1/a__rep2"].after_keys == [  # demo's a: after all of E4
        "glue-tvt_cola_seed1/c", "glue-tvt_cola_seed1/c__rep2", *round1]
    assert job_record(jobs["glue-tvt_cola_seed1/c"])["after_keys"] == round1
    assert "after_keys" not in job_record(jobs["glue-tvt_cola_seed1/b"])


def test_the_plans_after_ids_go_to_every_job_and_into_the_journal(configs, tmp_path):
    plan = make_plan(configs, tmp_path, after="7 9", suites=[{"name": "demo"}, {"name": "E4", "after": "demo"}])
    jobs = expand(plan, SuiteRegistry(configs))
    assert plan.after == [7, 9] and all(j.after_ids == [7, 9] for j in jobs)
    store = Store(tmp_path / "journal.sqlite")
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [], 0.0)
    ids = store.add_jobs(run_id, [job_record(j) for j in jobs])
    rows = store.jobs(run_id)
    assert rows[0].after == (7, 9) and rows[-1].after == (*ids[:2], 7, 9)  # demo's two pairs and the ids, sorted


@pytest.mark.parametrize("suites, says", [
    ([{"name": "demo", "after": "E5"}], "field 'suites[0].after': suite 'E5' is not in this plan (its suites: demo)"),
    ([{"name": "E4", "rounds": [1]}, {"name": "demo", "after": {"suite": "E4", "rounds": [2]}}],
     "field 'suites[1].after': this plan runs no round 2 of 'E4' (it runs 1)"),
    ([{"name": "E4", "after": {"suite": "E4", "rounds": [1]}}],
     "field 'suites[0].after': the entry would wait for its own jobs (round 1 of 'E4')"),
    ([{"name": "E4", "after": "demo"}, {"name": "demo", "after": ["E4"]}],
     "field 'suites': entries wait for each other in a circle, so none could start: suites[0] (E4) -> "
     "suites[1] (demo) -> suites[0] (E4)"),
    ([{"name": "demo", "after": {"suite": "demo", "round": [1]}}], "unknown field 'suites[0].after[0].round'"),
])
def test_an_after_that_cannot_work_is_a_plan_problem(configs, tmp_path, suites, says):
    with pytest.raises(PlanError) as caught:
        make_plan(configs, tmp_path, suites=suites)
    assert says in caught.value.problems, caught.value.problems


def test_after_a_job_the_journal_does_not_hold_exits_2_and_starts_nothing(configs, tmp_path, capsys):
    from lat_tui.cli import main

    code = main(["--configs", str(configs), "--suite", "demo", "--pairs", "1:tiny-sst2", "--gpus", "cpu",
                 "--after", "41", "--output-root", str(tmp_path / "out"), "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2 and "field 'after': no job 41 in this state directory's journal" in err, err
    assert Store(tmp_path / "state" / "journal.sqlite").runs() == []


def test_a_journal_from_before_dependencies_opens_with_none(tmp_path):
    path = tmp_path / "journal.sqlite"
    store = Store(path)
    run_id = store.create_run("plan: test", str(tmp_path), [], 0.0)
    store.add_jobs(run_id, [{"key": "k", "suite": "s", "round": 1, "stem": "k", "seed": 1, "dataset": "d",
                             "job_dir": str(tmp_path / "k"), "argv": [], "env": {}}])
    store.close()
    db = sqlite3.connect(path)
    db.executescript("DROP INDEX jobs_after; ALTER TABLE jobs DROP COLUMN after_json;")
    db.close()
    again = Store(path)
    assert again.jobs(run_id)[0].after == () and again.queued_dependents(run_id) == []


def test_jobs_added_to_a_live_run_may_wait_for_a_job_of_the_journal(tmp_path):
    from lat_core.config.paths import config_trees
    from lat_core.front.plan import plan_from_mapping
    from lat_core.front.service import create_run, jobs_to_add, open_store, prepare_run

    registry, state = SuiteRegistry(config_trees()), tmp_path / "state"
    plan = plan_from_mapping({"suites": [{"name": "demo"}], "pairs": ["1:tiny-sst2"], "gpus": "cpu",
                              "countdown_minutes": 30, "output_root": str(tmp_path / "runs")}, registry, where="test")
    store = open_store(state)
    run = store.run(create_run(store, prepare_run(plan, registry=registry)))
    parent = store.jobs(run.id)[0].id
    added = jobs_to_add(run, ["demo"], "all", "2:tiny-sst2", registry, state, after=str(parent))
    assert added and all(job["after_ids"] == [parent] for job in added)
    with pytest.raises(PlanError, match="field 'after': no job 999 in this state directory's journal"):
        jobs_to_add(run, ["demo"], "all", "3:tiny-sst2", registry, state, after="999")
    assert not list((tmp_path / "runs").glob("tiny-sst2_seed3"))  # refused before any folder is written
