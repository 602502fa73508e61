"""The engine's per-tick journal reads: only active jobs, in plan order, counted by SQL."""

import pytest

from lat_core.contract.journal import Store


def job(key: str) -> dict:
    return {"key": key, "suite": "s", "round": 1, "stem": key, "seed": 1, "dataset": "d", "job_dir": f"/x/{key}",
            "argv": ["python", key], "env": {"A": key}}


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "journal.sqlite")
    yield store
    store.close()


def run_with(store: Store, states: list[str]) -> tuple[int, list[int]]:
    """A run whose jobs j0, j1, ... are in ``states`` (set through the engine's own writes)."""
    run_id = store.create_run("plan: t", "/out", [], 0.0)
    ids = store.add_jobs(run_id, [job(f"j{i}") for i in range(len(states))])
    for job_id, state in zip(ids, states):
        if state != "queued":
            store.set_job_state(job_id, state)
    return run_id, ids


def test_queued_jobs_in_plan_order_with_limit_and_start(store):
    run_id, _ = run_with(store, ["queued", "running", "queued", "succeeded", "queued", "queued"])
    other, _ = run_with(store, ["queued"])
    assert [j.key for j in store.queued_jobs(run_id)] == ["j0", "j2", "j4", "j5"]
    assert [j.key for j in store.queued_jobs(run_id, limit=2)] == ["j0", "j2"]
    after = store.queued_jobs(run_id, limit=2)[-1].seq
    assert [j.key for j in store.queued_jobs(run_id, limit=2, after_seq=after)] == ["j4", "j5"]
    first = store.queued_jobs(run_id, limit=1)[0]
    assert (first.argv, first.env) == (["python", "j0"], {"A": "j0"})  # whole rows, JSON decoded
    assert [j.key for j in store.queued_jobs(other)] == ["j0"]


def test_iter_queued_pages_through_all_and_skips_jobs_started_meanwhile(store):
    run_id, ids = run_with(store, ["queued"] * 7)
    assert [j.key for j in store.iter_queued(run_id, first_page=3)] == [f"j{i}" for i in range(7)]
    seen = []
    for j in store.iter_queued(run_id, first_page=2, max_page=2):
        seen.append(j.key)
        if j.key == "j1":  # started while its page is in use; a later page must not bring j1 back
            store.set_job_state(j.id, "running")
            store.set_job_state(ids[4], "running")  # started before its page is read: skipped
    assert seen == ["j0", "j1", "j2", "j3", "j5", "j6"]


def test_iter_queued_stops_reading_when_the_caller_stops(store):
    run_id, _ = run_with(store, ["queued"] * 5)
    pages = store.iter_queued(run_id, first_page=2, max_page=2)
    assert next(pages).key == "j0"
    store.set_job_state(store.queued_jobs(run_id)[-1].id, "cancelled")
    assert [j.key for j in pages] == ["j1", "j2", "j3"]  # later pages are read lazily


def test_iter_queued_pages_grow_from_a_few_rows(store, monkeypatch):
    """Admission with one free slot decodes a few queued rows, not a page of 64."""
    run_id, _ = run_with(store, ["queued"] * 200)
    limits = []
    read = store.queued_jobs

    def spy(run, limit=None, after_seq=0):
        limits.append(limit)
        return read(run, limit, after_seq)

    monkeypatch.setattr(store, "queued_jobs", spy)
    assert next(store.iter_queued(run_id)).key == "j0" and limits == [4]
    limits.clear()
    assert len(list(store.iter_queued(run_id))) == 200
    assert limits == [4, 8, 16, 32, 64, 64, 64, 64]  # 188 rows, then the last 12, then an empty page


def test_queued_heads_are_the_first_queued_ids_and_attempts(store):
    run_id, ids = run_with(store, ["running", "queued", "failed", "queued", "queued"])
    run_with(store, ["queued"])
    assert store.queued_heads(run_id, 2) == [(ids[1], 0), (ids[3], 0)]
    assert len(store.queued_heads(run_id, 16)) == 3


def test_running_jobs_only_running_in_plan_order(store):
    run_id, _ = run_with(store, ["running", "queued", "failed", "running"])
    run_with(store, ["running"])
    assert [j.key for j in store.running_jobs(run_id)] == ["j0", "j3"]


def test_job_counts_per_state(store):
    run_id, _ = run_with(store, ["queued", "running", "succeeded", "succeeded", "failed"])
    run_with(store, ["queued"] * 3)
    assert store.job_counts(run_id) == {"queued": 1, "running": 1, "succeeded": 2, "failed": 1}
    empty = store.create_run("plan: t", "/out", [], 0.0)
    assert store.job_counts(empty) == {}


def test_has_unfinished_jobs_until_every_job_is_final(store):
    run_id, ids = run_with(store, ["succeeded", "failed", "queued", "cancelled"])
    assert store.has_unfinished_jobs(run_id)
    store.set_job_state(ids[2], "running")
    assert store.has_unfinished_jobs(run_id)
    store.set_job_state(ids[2], "succeeded")
    assert not store.has_unfinished_jobs(run_id)
    assert not store.has_unfinished_jobs(store.create_run("plan: t", "/out", [], 0.0))  # no job at all


def test_open_attempts_of_one_run_in_attempt_order(store):
    run_id, ids = run_with(store, ["queued", "queued", "queued"])
    other, other_ids = run_with(store, ["queued"])
    second, _ = store.start_attempt(ids[1], "cpu", "/x/j1/.lat/attempt-1.exit.json")
    first, _ = store.start_attempt(ids[0], "cpu", "/x/j0/.lat/attempt-1.exit.json")
    ended, _ = store.start_attempt(ids[2], "cpu", "/x/j2/.lat/attempt-1.exit.json")
    store.start_attempt(other_ids[0], "cpu", "/x/j0/.lat/attempt-1.exit.json")
    store.finish_attempt(ended, 0, "succeeded", "exit 0")
    assert [a.id for a in store.open_attempts(run_id)] == [second, first]
    assert [a.job_id for a in store.open_attempts(other)] == [other_ids[0]]


def test_a_batch_commits_once_and_a_write_inside_it_fails_alone(store, tmp_path):
    run_id, ids = run_with(store, ["queued", "queued"])
    reader = Store(tmp_path / "journal.sqlite")
    with store.batch():
        store.set_progress(ids[0], 3, 0.5)
        with pytest.raises(ZeroDivisionError):
            with store._tx() as db:  # a write that fails inside the batch: undone, the rest stays
                db.execute("UPDATE jobs SET last_step=99 WHERE id=?", (ids[1],))
                1 / 0
        assert reader.job(ids[0]).last_step is None  # nothing committed before the batch ends
    assert (reader.job(ids[0]).last_step, reader.job(ids[1]).last_step) == (3, None)
    with pytest.raises(ValueError):
        with store.batch():
            store.set_progress(ids[1], 5, 0.1)
            raise ValueError("the whole batch is undone")
    assert reader.job(ids[1]).last_step is None
    reader.close()
