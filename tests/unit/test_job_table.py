"""The job table's rows (``JobSummary``): the journal's plain columns, read in one query for
``status``, ``wait`` and each poll of the TUI, equal to the whole rows' same fields."""

from __future__ import annotations

import dataclasses

import pytest

from lat_core.front.client import Client
from lat_core.config.suites import SuiteRegistry
from lat_core.config.paths import config_trees
from lat_core.front.plan import plan_from_mapping
from lat_core.contract.rows import SUMMARY_COLUMNS, JobRow, JobSummary
from lat_core.front.service import create_run, open_store, prepare_run
from lat_core.contract.states import JobState
from lat_core.contract.journal import Store


def job(key: str, **extra) -> dict:
    return {"key": key, "suite": "s", "round": 1, "stem": key, "seed": 1, "dataset": "d", "job_dir": f"/x/{key}",
            "argv": ["python", key], "env": {"A": key}, **extra}


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "journal.sqlite")
    yield store
    store.close()


def test_summaries_equal_the_whole_rows_fields_in_plan_order(store):
    run_id = store.create_run("plan: t", "/out", [], 0.0)
    ids = store.add_jobs(run_id, [job("a", family="mamba"), job("b"), job("c", world=2)])
    store.set_job_state(ids[1], JobState.FAILED, "boom", error="boom")
    store.record_peak_rss(ids[2], 123)
    summaries, rows = store.job_summaries(run_id), store.jobs(run_id)
    assert [type(s) for s in summaries] == [JobSummary] * 3
    for summary, row in zip(summaries, rows):
        assert isinstance(row, JobRow) and isinstance(row, JobSummary)
        assert summary == JobSummary(**{name: getattr(row, name) for name in SUMMARY_COLUMNS})
    assert [s.key for s in summaries] == ["a", "b", "c"]
    assert summaries[0].family == "mamba" and summaries[1].family is None
    assert summaries[1].state is JobState.FAILED and summaries[1].error == "boom"
    assert (summaries[2].world, summaries[2].peak_rss) == (2, 123)
    assert not hasattr(summaries[0], "argv")  # the table row carries nothing that must be decoded


def test_a_column_added_by_a_newer_lat_does_not_stop_reading(store):
    """A journal's schema grows by ALTER TABLE ADD COLUMN: a front end of a newer version migrates
    it while this version's engine keeps reading it."""
    run_id = store.create_run("plan: t", "/out", [], 0.0)
    (job_id,) = store.add_jobs(run_id, [job("a")])
    store._db.execute("ALTER TABLE jobs ADD COLUMN from_the_future TEXT")
    store._db.execute("ALTER TABLE runs ADD COLUMN from_the_future TEXT")
    assert store.job(job_id).argv == ["python", "a"] and store.run(run_id).id == run_id
    assert [s.key for s in store.job_summaries(run_id)] == ["a"]


def test_a_plan_run_keeps_each_jobs_model_family_in_the_journal(tmp_path):
    """The table names the model from the journal, not by reading every job.yaml."""
    registry = SuiteRegistry(config_trees())
    plan = plan_from_mapping({"suites": [{"name": "demo", "rounds": "all"}], "pairs": ["1:tiny-sst2"],
                              "gpus": "cpu", "slots": 1, "countdown_minutes": 0,
                              "output_root": str(tmp_path / "out")}, registry, where="test plan")
    store = open_store(tmp_path / "state")
    run_id = create_run(store, prepare_run(plan, registry=registry, environ={}))
    store.close()
    client = Client(tmp_path / "state")
    jobs = client.job_table(run_id)
    assert sorted(j.family for j in jobs) == ["gla", "mamba"]
    for j in jobs:
        (tmp_path / "out" / j.key / "job.yaml").unlink()
        assert client.model_family(j) == j.family  # no file read
        assert client.model_family(client.job(j.id)) == j.family
    client.close()


def test_summary_fields_are_the_whole_rows_first_fields():
    """One list of columns: a JobRow is a JobSummary plus the decoded ones."""
    whole = [f.name for f in dataclasses.fields(JobRow)]
    assert whole[: len(SUMMARY_COLUMNS)] == list(SUMMARY_COLUMNS)
    assert set(whole) - set(SUMMARY_COLUMNS) == {"argv", "env", "diagnosis", "use_libuv", "avoid_devices",
                                                 "backend_options", "after"}
