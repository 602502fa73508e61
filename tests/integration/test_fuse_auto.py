"""The engine under plan ``fuse: auto`` on a GPU: same-base jobs fuse only where the committed
measurement (lat_core.config.fuse_measured) says a group wins for their family and row width;
elsewhere each trains alone and its history says why; ``fuse: true`` groups them all the same.
The trainer is a stand-in (tests/helpers/stand_in_trainer.py) behind the real launch: no GPU needed."""
import sys
import time
from pathlib import Path

import yaml

from lat_core.contract.commands import CancelRun
from lat_core.contract.jobdir import AttemptFiles
from lat_core.contract.journal import Store
from lat_core.engine.admission import AdmissionPolicy, GiB
from lat_core.engine.launch import launch
from lat_core.engine.loop import Engine
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from lat_core.monitor.host import HostSnapshot
from tests.integration.test_admission import gpu_device
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = ROOT / "tests" / "helpers" / "stand_in_trainer.py"
FAMILIES = {"mamba": "configs/experiments/mamba/tiny_lora.yaml", "gla": "configs/experiments/gla/tiny_lora_qkvo.yaml"}


def stand_in_launch(argv, env, job_dir, exit_path, show_env=()):
    return launch([sys.executable, str(STAND_IN), *argv], env, job_dir, exit_path, show_env)


def jobs(root: Path, family: str) -> list[dict]:
    """Two jobs of one tiny base (ranks 4 and 8), each the real trainer's command on its job.yaml."""
    out = []
    for r in (4, 8):
        name = f"{family}_r{r}"
        folder = root / name
        folder.mkdir(parents=True)
        raw = yaml.safe_load((ROOT / FAMILIES[family]).read_text())
        raw["peft"].update(r=r, alpha=2 * r)
        (folder / "job.yaml").write_text(yaml.safe_dump({**raw, "name": name, "output_dir": str(folder)}))
        out.append({"key": name, "suite": "t", "round": 1, "stem": name, "seed": 1, "dataset": "tiny-sst2",
                    "job_dir": str(folder), "env": {},
                    "argv": [sys.executable, "-m", "lat_core.train", "--cfg", str(folder / "job.yaml")]})
    return out


def run(tmp_path: Path, fuse: str, family: str):
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run(f"fuse: {fuse}\nwarm_start: false\n", str(tmp_path / "out"), [gpu_device(0, slots=2)], 0.0)
    store.add_jobs(run_id, jobs(tmp_path / "out", family))
    engine = Engine(store, gpu_probe=GpuProbe(FakeNvml.with_gpus(1, total=80 * GiB)), launch_fn=stand_in_launch,
                    policy=AdmissionPolicy(settle_s=600))
    engine._admission._host = lambda: HostSnapshot(512 * GiB, 0, 512 * GiB, 0, 0, 0.0, 16)  # as prior_engine
    return store, run_id, engine


def drain(engine) -> None:
    deadline = time.time() + HANG_S
    while engine.tick():
        assert time.time() < deadline, "engine did not drain in time"
        time.sleep(0.05)


def fused_lines(store, run_id) -> dict[str, str]:
    return {store.job(t.job_id).key: t.detail for t in store.transitions(run_id) if t.new_state == "fused"}


def grouped(store, run_id) -> list[bool]:
    return [AttemptFiles(store.attempts(j.id)[0].exit_path).read_group_ref() is not None for j in store.jobs(run_id)]


def unmeasured_mamba(monkeypatch) -> None:
    """The table as it was before Mamba was measured: whatever it holds now, the rule under test is
    that an unmeasured family trains alone."""
    import lat_core.config.fuse_measured as FM
    monkeypatch.setattr(FM, "MEASURED", tuple(m if m.family != "mamba" else FM.FuseMeasurement("mamba", m.rows, None)
                                              for m in FM.MEASURED))


def test_auto_fuses_only_a_family_measured_to_win_and_says_why_the_others_train_alone(tmp_path, monkeypatch):
    unmeasured_mamba(monkeypatch)
    store, run_id, engine = run(tmp_path / "gla", "auto", "gla")   # GLA on short rows: measured 8.2x
    drain(engine)
    assert {j.state for j in store.jobs(run_id)} == {"succeeded"} and grouped(store, run_id) == [True, True]
    store, run_id, engine = run(tmp_path / "auto", "auto", "mamba")
    drain(engine)
    assert {j.state for j in store.jobs(run_id)} == {"succeeded"} and grouped(store, run_id) == [False, False]
    said = fused_lines(store, run_id)
    assert said == dict.fromkeys(("mamba_r4", "mamba_r8"), "trains alone: fuse auto: a fused mamba group on short rows "
                                 "is not measured yet (lat_core/config/fuse_measured.py); fuse: true fuses it")
    store, run_id, engine = run(tmp_path / "true", "true", "mamba")
    drain(engine)
    assert {j.state for j in store.jobs(run_id)} == {"succeeded"} and grouped(store, run_id) == [True, True]


def slow_path_mamba(tmp_path, monkeypatch, gpu_gib: int):
    """8 Mamba-130m jobs on 256-token rows under ``fuse: true`` on a GPU of ``gpu_gib``, one engine tick
    in: slow-path activations (~40 GiB a member, from the static prior)."""
    import lat_core.config.memory_prior as memory_prior
    from tests.integration.test_admission import MAMBA_130M

    monkeypatch.setattr(memory_prior, "fast_path_expected", lambda: False)
    store = Store(tmp_path / "state" / "journal.sqlite")
    run_id = store.create_run("fuse: true\nwarm_start: false\n", str(tmp_path / "out"), [gpu_device(0, slots=8)], 0.0)
    specs = []
    for r in range(4, 12):
        folder = tmp_path / "out" / f"mamba_r{r}"
        folder.mkdir(parents=True)
        config = {**MAMBA_130M, "peft": {**MAMBA_130M["peft"], "r": r, "alpha": 2 * r}}
        (folder / "job.yaml").write_text(yaml.safe_dump({**config, "name": folder.name, "output_dir": str(folder)}))
        specs.append({"key": folder.name, "suite": "t", "round": 1, "stem": folder.name, "seed": 1,
                      "dataset": "tiny-sst2", "job_dir": str(folder), "env": {},
                      "argv": [sys.executable, "-m", "lat_core.train", "--cfg", str(folder / "job.yaml")]})
    store.add_jobs(run_id, specs)
    engine = Engine(store, gpu_probe=GpuProbe(FakeNvml.with_gpus(1, total=gpu_gib * GiB)), launch_fn=stand_in_launch,
                    policy=AdmissionPolicy(settle_s=600, gpu_margin=GiB))
    engine._admission._host = lambda: HostSnapshot(512 * GiB, 0, 512 * GiB, 0, 0, 0.0, 16)
    engine.tick()
    return store, run_id, engine


def test_a_fused_slow_path_mamba_group_takes_only_the_members_that_fit(tmp_path, monkeypatch):
    """On a 140 GiB GPU only 3 members share the group."""
    store, run_id, engine = slow_path_mamba(tmp_path, monkeypatch, 140)
    running = [j for j in store.jobs(run_id) if j.state == "running"]
    groups = store.groups_of(j.id for j in running)
    assert len(running) == 3 and len(set(groups.values())) == 1 and len(groups) == 3, (running, groups)
    store.add_command(run_id, CancelRun())
    drain(engine)


def test_a_job_whose_mate_does_not_fit_beside_it_says_so_when_it_trains_alone(tmp_path, monkeypatch):
    """On an 80 GiB GPU two members do not fit (seen on an H100, 2026-11-27): the job alone says that,
    not that no queued job shares its base, data and settings."""
    store, run_id, engine = slow_path_mamba(tmp_path, monkeypatch, 80)
    running = [j for j in store.jobs(run_id) if j.state == "running"]
    assert len(running) == 1 and not store.groups_of(j.id for j in running)
    said = fused_lines(store, run_id)[running[0].key]
    mate = next(j for j in store.jobs(run_id) if j.state != "running")
    assert said.startswith(f"trains alone: job {mate.id} shares its base, data and settings, but not in one group "
                           "now: needs "), said
    assert "GPU memory" in said and "free on gpu0" in said, said
    store.add_command(run_id, CancelRun())
    drain(engine)
