"""Gang scheduling and torchrun launches (gloo on the CPU)."""

import sys
from pathlib import Path

import pytest

from lat_core.contract.commands import CancelRun
from lat_core.engine.loop import Engine
from lat_core.contract.devices import Device
from lat_core.engine.placement import distributed_argv, find_free_port, placements, slots_used
from lat_core.contract.rows import JobRow
from tests.conftest import fake_job
from tests.integration.test_engine import drain, make_run

ROOT = Path(__file__).resolve().parents[2]


def ddp_job(tmp_path, name, world=2, use_libuv=True):
    job_dir = tmp_path / "out" / name
    job_dir.mkdir(parents=True)
    return {"key": name, "suite": "t", "round": 1, "stem": name, "seed": 1, "dataset": "tiny-sst2",
            "job_dir": str(job_dir), "argv": [sys.executable, "-m", "tests.helpers.ddp_probe"],
            "env": {"PYTHONPATH": str(ROOT)}, "world": world, "use_libuv": use_libuv}


@pytest.mark.slow
def test_two_process_gloo_job_runs_under_torchrun_through_the_engine(tmp_path):
    cpu = {"id": "cpu", "label": "cpu", "slots": 2, "env": {"CUDA_VISIBLE_DEVICES": ""}}
    store, run_id = make_run(tmp_path, [ddp_job(tmp_path, "ddp", use_libuv=False)], devices=[cpu])
    drain(store)
    job = store.jobs(run_id)[0]
    assert job.state == "succeeded", (tmp_path / "out" / "ddp" / "train.log").read_text()[-2000:]
    ranks = [(tmp_path / "out" / "ddp" / f"rank{r}.txt").read_text().split() for r in (0, 1)]
    assert all(r[0] == "2" and float(r[1]) == 3.0 for r in ranks)  # world 2, all-reduce of 1 + 2
    assert ranks[0][3] == "0"  # the libuv switch reached the processes
    history = [(t.new_state, t.detail) for t in store.transitions(run_id, job_id=job.id)]
    assert any(s == "rendezvous" and d.startswith(f"port {ranks[0][2]} after") for s, d in history)


def test_gang_job_takes_all_its_slots_at_once_and_never_partially(tmp_path):
    cpu = {"id": "cpu", "label": "cpu", "slots": 2, "env": {"CUDA_VISIBLE_DEVICES": ""}}
    jobs = [fake_job(tmp_path, "single", sleep=1.0), {**fake_job(tmp_path, "gang", sleep=0.3), "world": 2}]
    jobs[1]["argv"] = jobs[0]["argv"]  # placement only: the gang job's argv is never run here
    store, run_id = make_run(tmp_path, jobs, devices=[cpu])
    engine = Engine(store)
    engine.tick()
    states = {j.key: j.state for j in store.jobs(run_id)}
    assert states == {"single": "running", "gang": "queued"}  # 1 slot free of the 2 it needs
    store.add_command(run_id, CancelRun())
    drain(store)


def row(world, device=None, state="queued"):
    return JobRow(1, 1, 1, "k", "s", 1, "a", 1, "d", "/x", state, device, 0, None, None, None, None,
                  None, None, world=world, argv=[], env={})


def test_placements_for_multi_gpu_jobs():
    gpus = [Device(f"gpu{i}", f"GPU {i}", 1, {"CUDA_VISIBLE_DEVICES": f"G{i}"}, index=i) for i in range(3)]
    assert [d.id for d in placements(row(2), gpus, {})[0]] == ["gpu0", "gpu1"]
    busy = slots_used([row(2, "gpu0+gpu1", "running")])
    assert busy == {"gpu0": 1, "gpu1": 1}
    assert placements(row(2), gpus, busy) == []  # only gpu2 is free: no partial allocation
    assert [d.id for d in placements(row(1), gpus, busy)[0]] == ["gpu2"]


def test_port_probing_skips_busy_ports():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        busy.listen()
        port, tries = find_free_port(start=taken)
    assert port != taken and tries >= 2
    argv = distributed_argv([sys.executable, "-m", "lat_core.train", "--cfg", "j.yaml"], 2, port)
    assert argv[1:4] == ["-m", "torch.distributed.run", "--nnodes=1"] and argv[-4:] == ["-m", "lat_core.train", "--cfg", "j.yaml"]


TINY_PRETRAIN = ["--depth=2", "--model_dim_per_layer=32", "--head_dim=32", "--seq_len=32", "--device_batch_size=2",
                 "--total_batch_size=128", "--num_iterations=12", "--eval_every=6", "--save_every=12",
                 "--warmup_iterations=2", "--lr=0.003"]


@pytest.mark.slow
def test_pretraining_runs_two_processes_through_the_engine(tmp_path):
    import json

    job_dir = tmp_path / "out" / "pretrain"
    job_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "lat_core.train.pretrain", "--preset", "conservative",
            "--output-dir", str(job_dir), *TINY_PRETRAIN]
    job = {"key": "pretrain", "suite": "t", "round": 1, "stem": "pretrain", "seed": 1, "dataset": "tiny-corpus",
           "job_dir": str(job_dir), "argv": argv, "env": {}, "world": 2}
    cpu = {"id": "cpu", "label": "cpu", "slots": 2, "env": {"CUDA_VISIBLE_DEVICES": ""}}
    store, run_id = make_run(tmp_path, [job], devices=[cpu])
    drain(store)
    assert store.jobs(run_id)[0].state == "succeeded", (job_dir / "train.log").read_text()[-3000:]
    events = [json.loads(l) for l in (job_dir / "events.jsonl").read_text().splitlines()]
    started = events[0]
    assert started["event"] == "started" and started["world"] == 2 and started["grad_accum"] == 1
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 12 and min(losses[-3:]) < losses[0]
    assert events[-1]["event"] == "finished" and (job_dir / "checkpoint-12" / "model.pt").exists()
