"""A job's Diagnosis through its one wire format and the journal: every field comes back equal, and a
damaged one is a clear DiagnosisError (``from_json``) or no diagnosis (the journal), never a crash."""

from __future__ import annotations

import json
import logging
import random
import sqlite3

import pytest

from lat_core.contract.diagnosis import (CHANGE_KINDS, AvoidDevice, BackendOption, ConfigChange, Diagnosis,
                                         DiagnosisError, EnvChange, Remedy, Resume, SlotsChange)
from lat_core.contract.failure_classes import FailureClass
from lat_core.contract.journal import Store
from lat_core.contract.states import JobState
from tests.conftest import fake_job

EVERY_CHANGE = (ConfigChange("train.batch_size", 4), EnvChange("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
                SlotsChange(-1), AvoidDevice(), Resume(), BackendOption("time", "02:00:00"))
FULL = Diagnosis(FailureClass.CUDA_OOM, "CUDA out of memory at step 42", "The job asked for 2 GiB more.",
                 (Remedy("all", "every kind", "none", changes=EVERY_CHANGE),
                  Remedy("smaller", "half the batch", "slower", {"train.batch_size": 2, "train.grad_accum": 2})),
                 {"requested_bytes": 2 * 2**30, "oom_kind": "peak"}, ("torch.OutOfMemoryError: CUDA out of memory",))


def test_every_change_kind_is_in_the_full_diagnosis():
    assert {type(c) for c in EVERY_CHANGE} == set(CHANGE_KINDS)


def test_to_json_and_back_is_equal_through_json_text():
    assert Diagnosis.from_json(json.loads(json.dumps(FULL.to_json()))) == FULL


def test_defaults_and_a_journal_from_before_typed_changes():
    old = {"class": "cuda_oom", "remedies": [{"key": "fewer", "patch": {"plan.slots_delta": -1}}]}
    diagnosis = Diagnosis.from_json(old)
    assert diagnosis == Diagnosis(FailureClass.CUDA_OOM, "", "", (Remedy("fewer", "", "", {"plan.slots_delta": -1}),))
    assert diagnosis.remedies[0].changes == (SlotsChange(-1),)
    assert Diagnosis.from_json({}).cls is FailureClass.EXIT_CODE


@pytest.mark.parametrize("damaged, says", [
    ([], "expected a JSON object"),
    ({"class": "melted"}, "unknown failure class 'melted'"),
    ({"title": 5}, "'title': expected text"),
    ({"remedies": "retry"}, "'remedies': expected a JSON list"),
    ({"remedies": [{"change": "x"}]}, "a remedy without a key"),
    ({"remedies": [{"key": "k", "changes": [{"kind": "teleport"}]}]}, "unknown remedy change kind 'teleport'"),
    ({"remedies": [{"key": "k", "changes": [{"kind": "config"}]}]}, "lacks field, value"),
    ({"remedies": [{"key": "k", "changes": [{"kind": "config", "field": [1], "value": 2}]}]}, "field of the wrong type"),
    ({"remedies": [{"key": "k", "changes": [{"kind": "slots", "delta": "1"}]}]}, "delta of the wrong type"),
    ({"remedies": [{"key": "k", "patch": {"plan.slots_delta": [1]}}]}, "int()"),
    ({"remedies": [{"key": "k", "patch": {"plan.warp": 1}}]}, "has no meaning"),
    ({"remedies": [{"key": "k", "patch": [1]}]}, "remedy 'k' patch: expected a JSON object"),
    ({"evidence": [1]}, "expected lines of text"),
    ({"numbers": [1]}, "'numbers': expected a JSON object"),
])
def test_a_damaged_diagnosis_says_what_is_wrong(damaged, says):
    with pytest.raises(DiagnosisError) as caught:
        Diagnosis.from_json(damaged)
    assert says in str(caught.value)


JUNK = (None, 0, -1, 1.5, True, "", "x", "cuda_oom", [], [1], {}, {"key": 1}, {"kind": "env"})


def _damage(node, rng: random.Random):
    """``node`` with one value somewhere in it replaced by junk."""
    if isinstance(node, dict) and node and rng.random() < 0.7:
        key = rng.choice(sorted(node))
        return {**node, key: _damage(node[key], rng)}
    if isinstance(node, list) and node and rng.random() < 0.7:
        at = rng.randrange(len(node))
        return [*node[:at], _damage(node[at], rng), *node[at + 1:]]
    return rng.choice(JUNK)


def test_randomly_damaged_diagnoses_read_or_raise_diagnosis_error_only():
    rng, good = random.Random(25), FULL.to_json()
    outcomes = set()
    for _ in range(3000):
        try:
            outcomes.add(type(Diagnosis.from_json(_damage(good, rng))).__name__)
        except DiagnosisError:
            outcomes.add("DiagnosisError")
    assert outcomes == {"Diagnosis", "DiagnosisError"}


@pytest.fixture
def journal(tmp_path):
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("plan: test", str(tmp_path / "out"), [], 0.0)
    yield store, run_id
    store.close()


def test_the_journal_keeps_a_diagnosis_as_its_type(journal, tmp_path):
    store, run_id = journal
    [job_id] = store.add_jobs(run_id, [fake_job(tmp_path, "a")])
    store.set_job_state(job_id, JobState.FAILED, "triaged", diagnosis=FULL)
    assert store.job(job_id).diagnosis == FULL
    store.set_job_state(job_id, JobState.QUEUED, "requeued", diagnosis=None)
    assert store.job(job_id).diagnosis is None


def _damage_in_journal(store: Store, job_id: int, text: str) -> None:
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE jobs SET diagnosis_json=? WHERE id=?", (text, job_id))


@pytest.mark.parametrize("text", ["{not json", '{"class": "melted"}', "[]", '{"remedies": [{"key": 3}]}'])
def test_a_damaged_diagnosis_in_the_journal_reads_as_none_and_is_logged_once(journal, tmp_path, caplog, text):
    store, run_id = journal
    [job_id] = store.add_jobs(run_id, [fake_job(tmp_path, f"a{abs(hash(text))}")])
    store.set_job_state(job_id, JobState.FAILED, "triaged", error="cuda_oom: out of memory", diagnosis=FULL)
    _damage_in_journal(store, job_id, text)
    with caplog.at_level(logging.WARNING, logger="lat_core.contract.rows"):
        rows = [store.job(job_id), store.jobs(run_id)[0]]
    assert [(r.diagnosis, r.error, r.state) for r in rows] == [(None, "cuda_oom: out of memory", JobState.FAILED)] * 2
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 1 and f"diagnosis_json of job {job_id} is damaged" in told[0]
