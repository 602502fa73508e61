"""Disk and path safety; resume/overwrite modes of jobs whose directories already hold output."""

import json

import pytest

from lat_core.config.suites import SuiteRegistry
from lat_core.errors import JournalError, OutputPathError
from lat_core.front.jobs import expand, job_mode
from lat_core.front.plan import plan_from_mapping
from lat_core.front.service import open_store, prepare_run
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from tests.unit.test_plan import configs  # noqa: F401  (fixture)


def plan_for(configs, out, **extra):
    data = {"suites": ["E4"], "pairs": ["1:tiny-sst2"], "output_root": str(out), **extra}
    return plan_from_mapping(data, SuiteRegistry(configs), where="t")


def test_output_root_under_a_file_is_a_clear_error(configs, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputPathError) as info:
        prepare_run(plan_for(configs, blocker / "runs"), registry=SuiteRegistry(configs))
    assert str(blocker / "runs") in str(info.value) and "cannot create output root" in str(info.value)


def test_state_dir_under_a_file_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(JournalError) as info:
        open_store(tmp_path / "file" / "state")
    assert "cannot open journal" in str(info.value)


def test_gpu_that_does_not_exist_is_named(configs, tmp_path):
    from lat_core.errors import GpuError

    plan = plan_for(configs, tmp_path / "o", gpus=[0, 5], slots=1)
    with pytest.raises(GpuError) as info:
        prepare_run(plan, registry=SuiteRegistry(configs), probe=GpuProbe(FakeNvml.with_gpus(2)))
    assert "GPU 5 does not exist (this machine has GPUs 0, 1)" in str(info.value)


def test_gpus_are_pinned_by_uuid(configs, tmp_path):
    plan = plan_for(configs, tmp_path / "o", gpus=[1], slots=2)
    prepared = prepare_run(plan, registry=SuiteRegistry(configs), probe=GpuProbe(FakeNvml.with_gpus(2)))
    assert dict(prepared.devices[0].env) == {"CUDA_VISIBLE_DEVICES": "GPU-fake-0001", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert prepared.devices[0].slots == 2


def _events(job_dir, *kinds):
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "events.jsonl").write_text("".join(json.dumps({"event": k}) + "\n" for k in kinds))


def test_job_modes(tmp_path):
    done, started, fresh = tmp_path / "done", tmp_path / "started", tmp_path / "fresh"
    _events(done, "started", "finished")
    _events(started, "started", "step")
    assert job_mode(done, resume=False, overwrite=False, strict=False) == "done"
    assert job_mode(done, resume=False, overwrite=True, strict=False) == "overwrite"
    assert job_mode(started, resume=True, overwrite=False, strict=False) == "resume"
    assert job_mode(fresh, resume=True, overwrite=False, strict=False) == "fresh"  # run-level: never started
    assert job_mode(fresh, resume=True, overwrite=False, strict=True) == "resume"  # config asked: strict


def test_succeeded_jobs_are_not_rerun_and_resume_adds_the_flag(configs, tmp_path):
    out = tmp_path / "o"
    first = expand(plan_for(configs, out), SuiteRegistry(configs))
    _events(first[0].job_dir, "started", "finished")
    _events(first[1].job_dir, "started", "checkpoint")
    jobs = expand(plan_for(configs, out, resume=True), SuiteRegistry(configs))
    assert [j.mode for j in jobs[:3]] == ["done", "resume", "fresh"]
    assert jobs[1].command()[-1] == "--resume"
    with pytest.raises(Exception) as info:
        plan_for(configs, out, resume=True, overwrite=True)
    assert "exclude each other" in str(info.value)


def test_unwritable_job_directory_is_a_clear_error(configs, tmp_path):
    from lat_core.front.jobs import materialize

    job = expand(plan_for(configs, tmp_path / "o"), SuiteRegistry(configs))[0]
    job.job_dir.parent.mkdir(parents=True)
    job.job_dir.write_text("a file where the job directory should be")
    with pytest.raises(OutputPathError) as info:
        materialize(job)
    assert str(job.job_dir) in str(info.value) and "cannot write the job directory" in str(info.value)


def test_a_journal_from_an_older_version_is_upgraded_in_place(tmp_path):
    import sqlite3

    from lat_core.contract.journal import Store

    old = sqlite3.connect(tmp_path / "journal.sqlite")
    old.executescript("""
      CREATE TABLE runs (id INTEGER PRIMARY KEY, created REAL NOT NULL, state TEXT NOT NULL, plan_yaml TEXT NOT NULL,
        output_root TEXT NOT NULL, devices_json TEXT NOT NULL, countdown_until REAL NOT NULL DEFAULT 0,
        started REAL, ended REAL, paused INTEGER NOT NULL DEFAULT 0);
      CREATE TABLE jobs (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL,
        suite TEXT NOT NULL, round INTEGER NOT NULL, stem TEXT NOT NULL, seed INTEGER NOT NULL, dataset TEXT NOT NULL,
        job_dir TEXT NOT NULL, argv_json TEXT NOT NULL, env_json TEXT NOT NULL, state TEXT NOT NULL, device TEXT,
        attempts INTEGER NOT NULL DEFAULT 0, started REAL, ended REAL, returncode INTEGER, last_step INTEGER,
        last_loss REAL, error TEXT, UNIQUE (run_id, key));
      INSERT INTO runs VALUES (1, 0, 'finished', 'p', '/o', '[]', 0, 0, 1, 0);
      INSERT INTO jobs (run_id, seq, key, suite, round, stem, seed, dataset, job_dir, argv_json, env_json, state)
        VALUES (1, 1, 'd_seed1/a', 's', 1, 'a', 1, 'd', '/o/a', '[]', '{}', 'succeeded');
    """)
    old.close()
    job = Store(tmp_path / "journal.sqlite").jobs(1)[0]
    assert job.key == "d_seed1/a" and job.world == 1 and job.diagnosis is None and job.peak_rss is None
