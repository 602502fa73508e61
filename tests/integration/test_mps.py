"""Plan ``mps: true``: the engine runs a private MPS control daemon for the run's GPUs, its jobs get
the client env, and the daemon is told to quit when the run ends. The control binary is a stand-in
script on PATH that logs how it was called (real MPS needs an NVIDIA GPU)."""

import os
import stat
import sys
import time

import yaml

from lat_core.engine.loop import Engine
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from lat_core.contract.journal import Store
from tests.helpers.waits import HANG_S

GPU = {"id": "gpu0", "index": 0, "uuid": "GPU-fake-0000", "label": "GPU 0", "slots": 2,
       "env": {"CUDA_VISIBLE_DEVICES": "GPU-fake-0000"}}


def fake_control(tmp_path, exit_code=0):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-cuda-mps-control"
    script.write_text(f"#!/bin/sh\necho \"$* stdin=$(cat -) pipe=$CUDA_MPS_PIPE_DIRECTORY "
                      f"visible=$CUDA_VISIBLE_DEVICES\" >> {tmp_path}/mps.calls\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def env_probe_job(tmp_path, name):
    job_dir = tmp_path / "out" / name
    job_dir.mkdir(parents=True)
    code = "import os; open('seen', 'w').write(os.environ.get('CUDA_MPS_PIPE_DIRECTORY', 'none'))"
    return {"key": name, "suite": "t", "round": 1, "stem": name, "seed": 1, "dataset": "tiny-sst2",
            "job_dir": str(job_dir), "argv": [sys.executable, "-c", code], "env": {}}


def run_with_mps(tmp_path, monkeypatch, bin_dir, mps=True):
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run(yaml.safe_dump({"mps": mps}), str(tmp_path / "out"), [GPU], 0.0)
    store.add_jobs(run_id, [env_probe_job(tmp_path, "a"), env_probe_job(tmp_path, "b")])
    engine = Engine(store, gpu_probe=GpuProbe(FakeNvml.with_gpus(1)))
    deadline = time.time() + HANG_S
    while engine.tick():
        assert time.time() < deadline
        time.sleep(0.05)
    return store, run_id


def test_jobs_of_an_mps_run_are_clients_of_a_private_daemon_stopped_at_the_end(tmp_path, monkeypatch):
    store, run_id = run_with_mps(tmp_path, monkeypatch, fake_control(tmp_path))
    pipe = tmp_path / "state" / "mps" / f"run{run_id}" / "pipe"
    assert [(tmp_path / "out" / n / "seen").read_text() for n in "ab"] == [str(pipe)] * 2
    calls = (tmp_path / "mps.calls").read_text().splitlines()
    assert calls[0] == f"-d stdin= pipe={pipe} visible=GPU-fake-0000"  # one daemon for the run's GPUs
    assert calls[-1].startswith(" stdin=quit") and len(calls) == 2
    assert any(t.new_state == "mps" and t.detail == "started" for t in store.transitions(run_id))


def test_where_mps_cannot_start_jobs_run_without_it_and_the_history_says_why(tmp_path, monkeypatch):
    store, run_id = run_with_mps(tmp_path, monkeypatch, fake_control(tmp_path, exit_code=1))
    assert [(tmp_path / "out" / n / "seen").read_text() for n in "ab"] == ["none", "none"]
    assert all(j.state == "succeeded" for j in store.jobs(run_id))
    why = [t.detail for t in store.transitions(run_id) if t.new_state == "mps"]
    assert len(why) == 1 and why[0].startswith("not used: nvidia-cuda-mps-control -d exited 1")


def test_no_daemon_without_mps_in_the_plan(tmp_path, monkeypatch):
    store, run_id = run_with_mps(tmp_path, monkeypatch, fake_control(tmp_path), mps=False)
    assert not (tmp_path / "mps.calls").exists()
    assert (tmp_path / "out" / "a" / "seen").read_text() == "none"
