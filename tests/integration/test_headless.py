"""``lat-tui --plan`` end to end: real engine process, real tiny trainers, exit codes, summary."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from lat_core.contract.commands import CancelRun
from lat_core.front.service import open_store
from lat_tui.cli import main
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def configs(tmp_path) -> Path:
    """The shipped configs plus a suite holding one config that fails at run time."""
    root = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", root)
    broken = yaml.safe_load((root / "experiments" / "mamba" / "tiny_lora.yaml").read_text())
    broken["peft"]["target_modules"] = ["no_such_proj"]
    (root / "experiments" / "mamba" / "broken.yaml").write_text(yaml.safe_dump(broken))
    suite = {"rounds": {1: ["mamba/tiny_lora.yaml", "mamba/broken.yaml"]}}
    (root / "suites" / "mixed.yaml").write_text(yaml.safe_dump(suite))
    (root / "suites" / "solo.yaml").write_text(yaml.safe_dump({"rounds": {1: ["mamba/tiny_lora.yaml"]}}))
    return root


@pytest.mark.slow
def test_demo_plan_succeeds_with_exit_code_0(tmp_path, configs, capsys):
    out_root = tmp_path / "runs"
    code = main(["--plan", str(configs / "plans" / "demo.yaml"), "--configs", str(configs),
                 "--output-root", str(out_root), "--state-dir", str(tmp_path / "state")])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "4/4 jobs succeeded" in text
    assert text.count("-> succeeded") == 4
    for job_dir in [out_root / f"tiny-sst2_seed{s}" / c for s in (1, 2) for c in ("tiny_lora_qkvo", "tiny_lora")]:
        events = [json.loads(l)["event"] for l in (job_dir / "events.jsonl").read_text().splitlines()]
        assert events[0] == "started" and events[-1] == "finished"
        assert (job_dir / "train.log").stat().st_size > 0
        assert yaml.safe_load((job_dir / "job.yaml").read_text())["seed"] in (1, 2)


@pytest.mark.slow
def test_a_failed_job_gives_exit_code_1_and_is_named(tmp_path, configs, capsys):
    code = main(["--suite", "mixed", "--pairs", "3:tiny-sst2", "--gpus", "cpu", "--gpu-plan", "2",
                 "--configs", str(configs), "--output-root", str(tmp_path / "runs"),
                 "--state-dir", str(tmp_path / "state")])
    text = capsys.readouterr().out
    assert code == 1, text
    assert "1/2 jobs succeeded" in text
    failed_line = next(l for l in text.splitlines() if l.strip().startswith("failed:"))
    assert "broken 3:tiny-sst2" in failed_line and "no_such_proj" in failed_line  # named as in the TUI


def test_invalid_plan_exits_2_and_starts_nothing(tmp_path, configs, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text("suites: [demo]\npairs: ['1:tiny-sst2']\ngpus: cpu\nslots: [1, 2]\n"
                    f"output_root: {tmp_path / 'runs'}\n")
    code = main(["--plan", str(plan), "--configs", str(configs), "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{plan}" in err and "field 'slots'" in err
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "state").exists()


def test_gpus_on_a_machine_without_them_exit_2(tmp_path, configs, capsys, monkeypatch):
    from lat_core.monitor import gpu

    monkeypatch.setattr(gpu.GpuProbe, "snapshot", lambda self: gpu.GpuSnapshot((), "no GPU: driver not loaded"))
    code = main(["--suite", "demo", "--pairs", "1:tiny-sst2", "--gpus", "0 1", "--gpu-plan", "1",
                 "--configs", str(configs), "--output-root", str(tmp_path / "runs"),
                 "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2 and "no GPU: driver not loaded" in err
    assert not (tmp_path / "state").exists()


def test_status_prints_the_latest_run_and_restarts_its_dead_engine(tmp_path, capsys):
    import time

    from lat_core.front.service import EngineLock

    store = open_store(tmp_path / "state")
    run_id = store.create_run("p", str(tmp_path), [{"id": "cpu", "label": "cpu", "slots": 1, "env": {}}],
                              time.time() + 3600)  # a countdown keeps the job queued
    store.add_jobs(run_id, [{"key": "d_seed1/a", "suite": "s", "round": 1, "stem": "a", "seed": 1,
                             "dataset": "d", "job_dir": str(tmp_path), "argv": ["x"], "env": {}}])
    assert main(["status", "--state-dir", str(tmp_path / "state")]) == 0
    text = capsys.readouterr().out
    assert f"run {run_id}: countdown; engine restarted" in text and "a 1:d" in text and "queued" in text
    store.add_command(run_id, CancelRun())
    deadline = time.time() + HANG_S
    while EngineLock(tmp_path / "state").is_held():
        assert time.time() < deadline, "the restarted engine did not exit after the cancel"
        time.sleep(0.2)


def test_status_names_jobs_as_the_tui_does(tmp_path, capsys):
    """Model, config, seed and dataset from the one column spec (lat_tui/columns.py), not the key."""
    from lat_tui.columns import job_name

    store = open_store(tmp_path / "state")
    run_id = store.create_run("p", str(tmp_path), [{"id": "cpu", "label": "cpu", "slots": 1, "env": {}}], 0.0)
    job_dir = tmp_path / "tiny-sst2_seed1" / "tiny_lora"
    job_dir.mkdir(parents=True)
    (job_dir / "job.yaml").write_text("model: {family: mamba}\n")
    (job_id,) = store.add_jobs(run_id, [{"key": "tiny-sst2_seed1/tiny_lora", "suite": "s", "round": 1,
                                         "stem": "tiny_lora", "seed": 1, "dataset": "tiny-sst2",
                                         "job_dir": str(job_dir), "argv": ["x"], "env": {}}])
    store.set_job_state(job_id, "failed", returncode=1, error="exit 1", attempts=1)
    store.set_run_state(run_id, "finished")
    assert main(["status", "--state-dir", str(tmp_path / "state")]) == 0
    text = capsys.readouterr().out
    assert "tiny-sst2_seed1/tiny_lora" not in text
    row = next(line for line in text.splitlines() if line.startswith(str(job_id) + " "))
    assert "mamba/tiny_lora 1:tiny-sst2" in row and "failed" in row
    assert f"  {job_id} mamba/tiny_lora 1:tiny-sst2: exit 1" in text
    assert job_name(store.job(job_id), "mamba") == "mamba/tiny_lora 1:tiny-sst2"  # the TUI's name
    # one name everywhere: the progress stream, show, wait and triage say it too
    (job_dir / "train.log").write_text("Traceback (most recent call last):\nRuntimeError: boom\n")
    state = ["--state-dir", str(tmp_path / "state")]
    for verb in (["follow"], ["show", str(job_id)], ["wait"], ["triage", str(job_id)]):
        main([*verb, *state])
        text = "\n".join(line for line in capsys.readouterr().out.splitlines() if str(tmp_path) not in line)
        assert "mamba/tiny_lora 1:tiny-sst2" in text and "tiny-sst2_seed1/tiny_lora" not in text, (verb, text)


@pytest.mark.slow
def test_two_front_ends_at_once_share_one_engine_and_never_double_launch(tmp_path, configs):
    import subprocess
    import sys

    state = tmp_path / "state"
    procs = [subprocess.Popen([sys.executable, "-m", "lat_tui.cli", "--suite", "solo", "--pairs", f"{seed}:tiny-sst2",
                               "--gpus", "cpu", "--gpu-plan", "1", "--configs", str(configs), "--state-dir", str(state),
                               "--output-root", str(tmp_path / f"runs{seed}")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for seed in (1, 2)]
    outputs = [p.communicate(timeout=HANG_S)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    store = open_store(state)
    jobs = [j for run in store.runs() for j in store.jobs(run.id)]
    assert len(jobs) == 2 and all(j.state == "succeeded" and j.attempts == 1 for j in jobs)
    for job in jobs:  # each trainer started exactly once, by its own account
        starts = [l for l in Path(job.job_dir, "events.jsonl").read_text().splitlines() if '"started"' in l]
        assert len(starts) == 1
    engine_log = (state / "engine.log").read_text()
    assert engine_log.count("serving") + engine_log.count("another engine already serves") >= 1


def test_the_progress_stream_says_a_fused_groups_line_once(tmp_path, capsys):
    """Each member's history holds the group's line; the stream prints it at the first member."""
    store = open_store(tmp_path / "state")
    run_id = store.create_run("p", str(tmp_path), [{"id": "gpu0", "slots": 1, "env": {}}], 0.0)
    ids = store.add_jobs(run_id, [{"key": f"d_seed1/c{n}", "suite": "s", "round": 1, "stem": f"c{n}", "seed": 1,
                                   "dataset": "d", "job_dir": str(tmp_path / f"c{n}"), "argv": ["x"], "env": {}}
                                  for n in range(4)])
    line = f"group {ids[0]}.1: one process for jobs {', '.join(map(str, ids))} on gpu0"
    for job_id in ids:
        store.add_transition(run_id, job_id, "fused", line)
        store.set_job_state(job_id, "running", "attempt 1 on gpu0", attempts=1)
    store.set_run_state(run_id, "cancelled")
    main(["follow", "--state-dir", str(tmp_path / "state")])
    text = capsys.readouterr().out
    assert text.count(line) == 1 and text.count("queued -> running") == 4, text
