"""Every row type through the journal: written with every field away from its default, read back
equal (decoded once: the plan a SavedPlan, the diagnosis a Diagnosis, devices as Devices)."""

from __future__ import annotations

import dataclasses
import sqlite3
import time

import pytest

from lat_core.contract.devices import Device, cpu_device
from lat_core.contract.diagnosis import Diagnosis, Remedy
from lat_core.contract.failure_classes import FailureClass
from lat_core.contract.journal import Store
from lat_core.contract.rows import AttemptRow, GroupUsage, JobRow, JobSummary, RunRow, Transition
from lat_core.contract.saved_plan import SavedPlan
from lat_core.contract.states import HistoryKind, JobState, RunState
from lat_core.front.plan import Plan

GPU = Device("gpu0", "GPU 0 (H100)", 3, {"CUDA_VISIBLE_DEVICES": "GPU-1234"}, index=0, uuid="GPU-1234")
PLAN = Plan.model_validate({"suites": ["E4"], "pairs": ["87:glue-tvt_sst2"], "gpus": [0], "slots": 3,
                            "on_failure": {"classes": ["nccl"]}, "fuse": True}).to_yaml()
DIAGNOSIS = Diagnosis(FailureClass.CUDA_OOM, "CUDA out of memory", "It asked for 2 GiB more.",
                      (Remedy("fewer_slots", "one job fewer", "slower", {"plan.slots_delta": -1}),), {"peak": 3},
                      ("torch.OutOfMemoryError",))


@pytest.fixture
def store(tmp_path):
    journal = Store(tmp_path / "journal.sqlite")
    yield journal
    journal.close()


def away_from_defaults(row: object) -> list[str]:
    """Fields of ``row`` still at their dataclass default (a round trip of them would prove little)."""
    return [f.name for f in dataclasses.fields(row) if f.default is not dataclasses.MISSING  # type: ignore[arg-type]
            and getattr(row, f.name) == f.default]


def test_a_run_row(store, tmp_path):
    until = time.time() + 600
    run_id = store.create_run(PLAN, str(tmp_path / "runs"), [GPU, cpu_device(2)], until)
    store.set_devices(run_id, [GPU.with_slots(2)])
    store.set_paused(run_id, True)
    store.set_run_state(run_id, RunState.CANCELLED, "by hand")
    row = store.run(run_id)
    assert row.created <= row.ended and row.started is None  # a countdown run never started
    expected = RunRow(run_id, row.created, RunState.CANCELLED, SavedPlan.from_text(PLAN), str(tmp_path / "runs"),
                      [GPU.with_slots(2)], until, None, row.ended, True)
    assert row == expected and row.plan.fuse is True and row.plan.on_failure.classes == ("nccl",)
    assert store.runs() == [expected] and store.latest_run() == expected


def test_a_job_row_and_its_summary(store, tmp_path):
    run_id = store.create_run(PLAN, str(tmp_path), [GPU], 0.0)
    record = {"key": "glue-tvt_sst2_seed87/r8", "suite": "E4", "round": 2, "stem": "r8__rep1", "seed": 87,
              "dataset": "glue-tvt_sst2", "job_dir": str(tmp_path / "r8"), "argv": ["python", "-m", "lat_core.train"],
              "env": {"HP_LR": "0.1"}, "world": 2, "use_libuv": False, "family": "gla", "after_ids": [7, 3]}
    [job_id] = store.add_jobs(run_id, [record])
    for n in (1, 2):  # an earlier attempt that ran 3 s, and the latest
        attempt_id, _ = store.start_attempt(job_id, "gpu0", str(tmp_path / f"attempt-{n}"))
        store.finish_attempt(attempt_id, 1, JobState.FAILED, "failed")
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE attempts SET launched=1.0, ended=4.0 WHERE job_id=? AND n=1", (job_id,))
    store.set_job_state(job_id, JobState.FAILED, "triaged", device="gpu0", started=10.0, ended=20.0, returncode=1,
                        error="cuda_oom: CUDA out of memory", attempts=2, diagnosis=DIAGNOSIS, not_before=30.0,
                        fused_group="g1")
    store.set_progress(job_id, 42, 0.5)
    store.record_usage({job_id: (1000, 2000)})
    store.set_waiting(job_id, "memory")
    store.set_job_env(job_id, {"HP_LR": "0.05"})
    store.set_job_argv(job_id, ["python", "-m", "lat_core.train", "--resume"])
    store.set_job_avoid_devices(job_id, ["gpu1", "gpu0"])
    store.set_job_backend_options(job_id, {"time": "02:00:00"})
    row = store.job(job_id)
    summary = JobSummary(job_id, run_id, 1, record["key"], "E4", 2, "r8__rep1", 87, "glue-tvt_sst2", record["job_dir"],
                         JobState.FAILED, "gpu0", 2, 10.0, 20.0, 1, 42, 0.5, "cuda_oom: CUDA out of memory", 1000,
                         2000, 1000, 2000, "memory", 2, 30.0, row.added, "gla", "g1", 3.0)
    expected = JobRow(**{f.name: getattr(summary, f.name) for f in dataclasses.fields(summary)},
                      argv=["python", "-m", "lat_core.train", "--resume"], env={"HP_LR": "0.05"}, diagnosis=DIAGNOSIS,
                      use_libuv=0, avoid_devices=("gpu0", "gpu1"), backend_options={"time": "02:00:00"}, after=(3, 7))
    assert away_from_defaults(expected) == []
    assert row == expected and store.jobs(run_id) == [expected] and row.diagnosis.cls is FailureClass.CUDA_OOM
    assert store.job_summaries(run_id) == [summary] and away_from_defaults(summary) == []


def test_an_attempt_row(store, tmp_path):
    run_id = store.create_run(PLAN, str(tmp_path), [GPU], 0.0)
    [job_id] = store.add_jobs(run_id, [{"key": "a", "suite": "s", "round": 1, "stem": "a", "seed": 1, "dataset": "d",
                                        "job_dir": str(tmp_path), "argv": ["x"], "env": {}}])
    attempt_id, n = store.start_attempt(job_id, "gpu0", str(tmp_path / "attempt-1.exit.json"))
    store.set_attempt_pid(attempt_id, 4242, 123.5, ("vmstat", 7))
    store.request_cancel(attempt_id, 99.0)
    assert store.open_attempts(run_id)[0].id == attempt_id
    store.finish_attempt(attempt_id, -15, JobState.CANCELLED, "cancelled by user", ended=100.0)
    [row] = store.attempts(job_id)
    expected = AttemptRow(attempt_id, job_id, n, "gpu0", 4242, 123.5, row.launched, row.ended, -15,
                          str(tmp_path / "attempt-1.exit.json"), 99.0, "vmstat", 7)
    assert row == expected and row.ended is not None and away_from_defaults(row) == []
    assert store.job(job_id).state is JobState.CANCELLED and store.open_attempts(run_id) == []


def test_a_transition(store, tmp_path):
    run_id = store.create_run(PLAN, str(tmp_path), [GPU], 0.0)
    store.add_transition(run_id, None, HistoryKind.MPS, "not used: no GPU")
    created, note = store.transitions(run_id)
    assert created == Transition(created.id, created.ts, run_id, None, None, RunState.RUNNING, "run created")
    assert note == Transition(note.id, note.ts, run_id, None, None, HistoryKind.MPS, "not used: no GPU")
    assert store.transitions(run_id, after_id=created.id) == [note]


def test_a_fused_groups_usage(store, tmp_path):
    run_id = store.create_run(PLAN, str(tmp_path), [GPU], 0.0)
    ids = store.add_jobs(run_id, [{"key": k, "suite": "s", "round": 1, "stem": k, "seed": 1, "dataset": "d",
                                   "job_dir": str(tmp_path / k), "argv": ["x"], "env": {}} for k in "ab"])
    store.start_group("g1", run_id, "gpu0", 2, ids)
    store.record_group_usage("g1", 2, 300, 4000)
    store.record_group_usage("g1", 1, 200, 3000)
    store.record_group_peak_rss("g1", 500)
    expected = GroupUsage("g1", run_id, 2, "gpu0", 200, 3000, 500, 4000, 300, 4000)
    assert store.fused_group("g1") == expected and store.fused_groups(run_id) == {"g1": expected}
    assert store.groups_of(ids) == {ids[0]: "g1", ids[1]: "g1"}
