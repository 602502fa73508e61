"""One device ledger per state directory: every active run's jobs count against a device's slots,
and every active run's jobs are sampled; the same job folders are never run twice at once."""

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from lat_core.contract.commands import CancelRun
from lat_core.contract.devices import cpu_device
from lat_core.front.service import EngineLock, open_store
from lat_core.contract.journal import Store
from tests.conftest import fake_job, intervals, max_overlap
from tests.integration.test_engine import drain
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]


def test_two_runs_share_one_cpu_slot_and_both_get_memory_samples(tmp_path):
    store = Store(tmp_path / "state" / "journal.sqlite")
    runs = []
    for r in ("a", "b"):
        run_id = store.create_run("plan: test", str(tmp_path / "out"), [cpu_device(1)], 0.0)
        store.add_jobs(run_id, [fake_job(tmp_path, f"{r}{i}", sleep=1.2) for i in range(2)])
        runs.append(run_id)
    drain(store, sample_every_s=0.2)
    spans = intervals(tmp_path)
    assert len(spans) == 4
    assert max_overlap(spans.values()) == 1, spans
    for run_id in runs:
        for job in store.jobs(run_id):
            assert job.state == "succeeded"
            assert store.samples(job.id), f"{job.key} of run {run_id} got no memory sample"


def test_device_round_trips_through_the_journal(tmp_path):
    from lat_core.contract.devices import Device

    store = Store(tmp_path / "journal.sqlite")
    gpu = Device("gpu3", "GPU 3 H100", 2, {"CUDA_VISIBLE_DEVICES": "GPU-x", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                 index=3, uuid="GPU-x")
    run_id = store.create_run("plan: test", str(tmp_path), [gpu, cpu_device(4)], 0.0)
    assert store.run(run_id).devices == [gpu, cpu_device(4)]
    store.set_devices(run_id, [gpu.with_slots(5)])
    assert store.run(run_id).devices[0].slots == 5 and store.run(run_id).devices[0].uuid == "GPU-x"


def test_five_front_ends_with_one_plan_create_one_run_and_the_others_name_it(tmp_path):
    """Real ``lat-tui --plan`` processes started together; a long countdown keeps the jobs queued
    so the test needs no trainer: what matters is that only one run owns the job folders."""
    state, out = tmp_path / "state", tmp_path / "runs"
    argv = [sys.executable, "-m", "lat_tui.cli", "--plan", str(ROOT / "configs" / "plans" / "demo.yaml"),
            "--output-root", str(out), "--state-dir", str(state), "--sleep-mins", "30"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(5)]
    try:
        refused = _wait_for_exits(procs, count=4)
        store = open_store(state)
        runs = store.runs()
        assert len(runs) == 1, [r.id for r in runs]
        keys = [j.key for j in store.jobs(runs[0].id)]
        assert len(keys) == len(set(keys)) == 4
        for code, err in refused:
            assert code == 2, err
            assert f"run {runs[0].id} (countdown) is live" in err and str(out) in err
            assert "Traceback" not in err
    finally:
        _cancel_and_stop(state, procs)


def _wait_for_exits(procs, count, timeout=HANG_S):
    deadline = time.time() + timeout
    while sum(p.poll() is not None for p in procs) < count:
        assert time.time() < deadline, "front ends did not answer in time"
        time.sleep(0.2)
    return [(p.returncode, p.communicate()[1]) for p in procs if p.poll() is not None]


def _cancel_and_stop(state, procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    store = open_store(state)
    for run in store.active_runs():
        store.add_command(run.id, CancelRun())
    lock, deadline = EngineLock(state), time.time() + HANG_S
    while lock.is_held() and time.time() < deadline:  # the engine ends once the run is cancelled
        time.sleep(0.2)


def test_a_malformed_device_in_the_journal_is_a_clear_error(tmp_path):
    import pytest

    from lat_core.errors import JournalError

    store = Store(tmp_path / "journal.sqlite")
    run_id = store.create_run("plan: test", str(tmp_path), [cpu_device(1)], 0.0)
    with sqlite3.connect(tmp_path / "journal.sqlite") as other:  # what another writer left there
        other.execute("UPDATE runs SET devices_json=? WHERE id=?", ('[{"id": "cpu", "slots": "two"}]', run_id))
    with pytest.raises(JournalError, match=f"runs.devices_json of run {run_id}"):
        store.run(run_id)


def test_adding_jobs_a_live_run_already_has_writes_nothing_and_names_the_run(tmp_path):
    import pytest

    from lat_core.config.paths import config_trees
    from lat_core.config.suites import SuiteRegistry
    from lat_core.errors import RunConflictError
    from lat_core.front.plan import plan_from_mapping
    from lat_core.front.service import create_run, jobs_to_add, prepare_run

    registry, state = SuiteRegistry(config_trees()), tmp_path / "state"
    plan = plan_from_mapping({"suites": [{"name": "demo"}], "pairs": ["1:tiny-sst2"], "gpus": "cpu",
                              "countdown_minutes": 30, "output_root": str(tmp_path / "runs")}, registry, where="test")
    store = open_store(state)
    run = store.run(create_run(store, prepare_run(plan, registry=registry)))
    job_yaml = next((tmp_path / "runs").rglob("job.yaml"))
    job_yaml.write_text("# what the running job reads\n")
    with pytest.raises(RunConflictError, match=f"run {run.id} \\(countdown\\) is live"):
        jobs_to_add(run, ["demo"], "all", "1:tiny-sst2", registry, state)
    assert job_yaml.read_text() == "# what the running job reads\n"
    added = jobs_to_add(run, ["demo"], "all", "2:tiny-sst2", registry, state)
    assert added and all("seed2" in job["key"] for job in added)
