"""On a real GPU: the NVML monitor against nvidia-smi, and a real CUDA OOM through the engine."""

import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from lat_core.engine.loop import Engine  # noqa: E402
from lat_core.monitor.gpu import GpuProbe  # noqa: E402
from lat_core.contract.journal import Store  # noqa: E402

HOG = """
import torch
chunks = []
print("allocating 2 GiB chunks until the card is full", flush=True)
while True:
    chunks.append(torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda"))
"""


def nvidia_smi_rows():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.used",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
    return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines()]


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi")
def test_monitor_matches_nvidia_smi():
    snap = GpuProbe().snapshot()
    rows = nvidia_smi_rows()
    assert snap.available and len(snap.gpus) == len(rows)
    for gpu, (index, uuid, name, total_mib, used_mib) in zip(snap.gpus, rows):
        print(f"GPU {index}: NVML {gpu.memory_used / 2**20:.0f}/{gpu.memory_total / 2**20:.0f} MiB, "
              f"nvidia-smi {used_mib}/{total_mib} MiB, util {gpu.utilization}%, {gpu.temperature} C, "
              f"{gpu.power_watts} W, uuid {gpu.uuid}")
        assert gpu.uuid == uuid and gpu.name == name
        assert abs(gpu.memory_total / 2**20 - int(total_mib)) <= 1
        assert abs(gpu.memory_used / 2**20 - int(used_mib)) <= 256  # read a moment apart


def test_real_cuda_oom_is_classified_and_triaged(tmp_path):
    gpu = GpuProbe().snapshot().gpus[0]
    device = {"id": "gpu0", "index": 0, "uuid": gpu.uuid, "label": gpu.name, "slots": 1,
              "env": {"CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}}
    job_dir = tmp_path / "hog"
    job_dir.mkdir()
    (job_dir / "hog.py").write_text(HOG)
    (job_dir / "job.yaml").write_text("train: {batch_size: 8, gradient_checkpointing: false, num_workers: 2}\n")
    store = Store(tmp_path / "journal.sqlite")
    run_id = store.create_run("p", str(tmp_path), [device], 0)
    store.add_jobs(run_id, [{"key": "hog", "suite": "t", "round": 1, "stem": "hog", "seed": 1, "dataset": "x",
                             "job_dir": str(job_dir), "argv": [sys.executable, str(job_dir / "hog.py")], "env": {}}])
    engine = Engine(store, sample_every_s=0.2)
    while engine.tick():
        pass
    job = store.jobs(run_id)[0]
    print(job.error)
    print(job.diagnosis.diagnosis)
    print([r.key for r in job.diagnosis.remedies], job.diagnosis.numbers)
    assert job.state == "failed" and job.diagnosis.cls == "cuda_oom"
    numbers = job.diagnosis.numbers
    assert numbers["requested_bytes"] == 2 * 2**30
    assert abs(numbers["capacity_bytes"] - gpu.memory_total) < 0.02 * gpu.memory_total
    assert numbers["oom_kind"] == "peak"  # alone on the card: this job itself exceeded it
    assert job.peak_gpu is None or job.peak_gpu >= 0
