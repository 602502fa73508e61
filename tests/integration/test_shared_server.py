"""A shared server: another user may write in the output root (and plant symlinks or folders there)
or have made the state directory. LAT never writes, appends or deletes through a planted symlink,
refuses folders other users own, and refuses system folders as output roots."""

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lat_core.config.suites import SuiteRegistry
from lat_core.errors import OutputPathError
from lat_core.front.jobs import expand, materialize
from lat_core.contract.jobdir import AttemptFiles, ExitRecord, JobDir, PeakUsage
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from lat_core.front.plan import plan_from_mapping
from lat_core.front.service import open_store, prepare_run
from tests.unit.test_plan import configs  # noqa: F401  (fixture)
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another uid owns needs root (chown)")


def other_uid() -> int:
    return pwd.getpwnam("nobody").pw_uid


def plan_for(configs, out, **extra):
    data = {"suites": ["E4"], "pairs": ["1:tiny-sst2"], "output_root": str(out), **extra}
    return plan_from_mapping(data, SuiteRegistry(configs), where="t")


def first_job(configs, out):
    return expand(plan_for(configs, out), SuiteRegistry(configs))[0]


@pytest.fixture
def outside(tmp_path) -> Path:
    """Another user's folder, outside the output root, with a file LAT must never touch."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "precious").write_text("keep me\n")
    return folder


def untouched(outside: Path) -> bool:
    return sorted(p.name for p in outside.iterdir()) == ["precious"] and \
        (outside / "precious").read_text() == "keep me\n"


def lat(state: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAT_STATE_DIR": str(state)}
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", *args], capture_output=True, text=True,
                          timeout=HANG_S, env=env, cwd=cwd)


# ------------------------------------------------------------------ the writers of a job folder
def test_job_files_replace_planted_symlinks_never_their_targets(configs, tmp_path, outside):
    job = first_job(configs, tmp_path / "o")
    job.job_dir.mkdir(parents=True)
    (job.job_dir / "job.yaml").write_text("an earlier run's\n")  # a reused folder: replaced through a temp file
    (job.job_dir / ".job.yaml.tmp").symlink_to(outside / "precious")
    (job.job_dir / "overrides.json").symlink_to(outside / "planted")  # dangling: a new file would be made there
    materialize(job)
    assert untouched(outside)
    assert yaml.safe_load((job.job_dir / "job.yaml").read_text())["resolved"] is True
    assert not (job.job_dir / "overrides.json").is_symlink() and json.loads((job.job_dir / "overrides.json").read_text())


def test_a_job_folder_reached_through_a_symlink_is_refused(configs, tmp_path, outside):
    job = first_job(configs, tmp_path / "o")
    job.job_dir.parent.parent.mkdir(parents=True)
    job.job_dir.parent.symlink_to(outside)  # <root>/tiny-sst2_seed1 -> another user's folder
    with pytest.raises(OutputPathError) as info:
        materialize(job)
    assert "is a symlink" in str(info.value) and str(job.job_dir.parent) in str(info.value)
    assert untouched(outside)


def test_the_engines_json_files_never_go_through_a_symlinked_runner_folder(tmp_path, outside):
    job_dir = tmp_path / "o" / "tiny-sst2_seed1" / "a"
    job_dir.mkdir(parents=True)
    (job_dir / ".lat").symlink_to(outside)
    with pytest.raises(OutputPathError, match="is a symlink"):
        JobDir(job_dir).write_peak_usage(PeakUsage(1, 2))
    assert untouched(outside)


def test_an_exit_record_replaces_a_planted_temp_link(tmp_path, outside):
    exit_path = JobDir(tmp_path / "o" / "tiny-sst2_seed1" / "a").attempt(1).exit_path
    exit_path.parent.mkdir(parents=True)
    Path(f"{exit_path}.tmp").symlink_to(outside / "precious")
    Path(exit_path.parent / f".{exit_path.name}.tmp").symlink_to(outside / "precious")
    AttemptFiles(exit_path).write_exit(ExitRecord(0))
    assert AttemptFiles(exit_path).read_exit() == ExitRecord(0)
    assert untouched(outside)


def test_the_runner_writes_no_record_through_a_symlinked_runner_folder(tmp_path, outside):
    job_dir = tmp_path / "o" / "tiny-sst2_seed1" / "a"
    job_dir.mkdir(parents=True)
    (job_dir / ".lat").symlink_to(outside)
    out = subprocess.run([sys.executable, "-m", "lat_core.runner", "--exit-file", str(JobDir(job_dir).attempt(1).exit_path),
                          "--", sys.executable, "-c", "pass"], capture_output=True, text=True, timeout=HANG_S,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and "[lat] cannot keep the exit record" in out.stdout and "is a symlink" in out.stdout
    assert untouched(outside)


def test_launch_never_appends_to_a_planted_log(tmp_path, outside):
    from lat_core.engine.launch import launch

    job_dir = tmp_path / "o" / "tiny-sst2_seed1" / "a"
    job_dir.mkdir(parents=True)
    (job_dir / "train.log").symlink_to(outside / "precious")
    with pytest.raises(OutputPathError, match="is a symlink"):
        launch([sys.executable, "-c", "print('from the job')"], {}, job_dir, JobDir(job_dir).attempt(1).exit_path)
    assert untouched(outside)


def test_launch_refuses_a_fifo_as_its_log(tmp_path):
    """A FIFO nobody reads would block the engine's open forever."""
    from lat_core.engine.launch import launch

    job_dir = tmp_path / "o" / "tiny-sst2_seed1" / "a"
    job_dir.mkdir(parents=True)
    os.mkfifo(job_dir / "train.log")
    with pytest.raises(OutputPathError, match="not a regular file"):
        launch([sys.executable, "-c", "pass"], {}, job_dir, JobDir(job_dir).attempt(1).exit_path)


def test_a_planted_log_fails_that_job_alone_and_the_engine_goes_on(tmp_path, outside):
    from tests.conftest import fake_job
    from tests.integration.test_engine import drain, make_run

    planted, clean = fake_job(tmp_path, "planted"), fake_job(tmp_path, "clean")
    (Path(planted["job_dir"]) / "train.log").symlink_to(outside / "precious")
    store, run_id = make_run(tmp_path, [planted, clean])
    drain(store)
    jobs = {j.key: j for j in store.jobs(run_id)}
    assert jobs["clean"].state == "succeeded" and jobs["planted"].state == "failed"
    assert "launch failed" in jobs["planted"].error and "is a symlink" in jobs["planted"].error
    assert untouched(outside)


# ------------------------------------------------------------------ --overwrite
def _outputs(folder: Path) -> None:
    for name in ("final", "best", "checkpoint-5", "predictions"):
        (folder / name).mkdir(parents=True)
        (folder / name / "adapter_model.safetensors").write_text("weights")
    (folder / "events.jsonl").write_text('{"event": "finished"}\n')


def test_overwrite_through_a_symlinked_job_folder_deletes_nothing(tmp_path):
    from lat_core.config.job import TrainConfigError
    from lat_core.train.checkpoints import prepare_output_dir

    victim = tmp_path / "someone-elses-run"
    _outputs(victim)
    job_dir = tmp_path / "o" / "tiny-sst2_seed1" / "a"
    job_dir.parent.mkdir(parents=True)
    job_dir.symlink_to(victim)
    with pytest.raises(TrainConfigError, match="is a symlink"):
        prepare_output_dir(job_dir, resume=False, overwrite=True)
    assert sorted(p.name for p in victim.iterdir()) == ["best", "checkpoint-5", "events.jsonl", "final", "predictions"]


def test_overwrite_deletes_only_the_runs_outputs_inside_the_real_folder(tmp_path, outside):
    from lat_core.train.checkpoints import prepare_output_dir

    job_dir = tmp_path / "o" / "tiny-sst2_seed1" / "a"
    _outputs(job_dir)
    (job_dir / "tokenizer").symlink_to(outside)  # a planted link goes; what it points to stays
    (job_dir / "checkpoint-notes").mkdir()  # not a checkpoint LAT writes
    (job_dir / "job.yaml").write_text("kept\n")
    prepare_output_dir(job_dir, resume=False, overwrite=True)
    assert sorted(p.name for p in job_dir.iterdir()) == ["checkpoint-notes", "job.yaml"]
    assert untouched(outside)


# ------------------------------------------------------------------ roots and the state directory
@pytest.mark.parametrize("root", ["/", "/etc", "/usr/lib/lat", "~"])
def test_a_system_folder_is_no_output_root(configs, root):
    with pytest.raises(OutputPathError, match="system folder|home folder itself"):
        prepare_run(plan_for(configs, root), registry=SuiteRegistry(configs), probe=GpuProbe(FakeNvml.with_gpus(0)))


@as_root
def test_an_output_root_another_user_owns_is_refused(configs, tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    os.chown(root, other_uid(), -1)
    with pytest.raises(OutputPathError, match="owned by nobody"):
        prepare_run(plan_for(configs, root), registry=SuiteRegistry(configs), probe=GpuProbe(FakeNvml.with_gpus(0)))


@as_root
def test_a_group_folder_another_user_planted_is_refused(configs, tmp_path):
    job = first_job(configs, tmp_path / "o")
    job.job_dir.parent.mkdir(parents=True)
    os.chown(job.job_dir.parent, other_uid(), -1)
    with pytest.raises(OutputPathError, match="owned by nobody"):
        materialize(job)
    assert not job.job_dir.exists()


@as_root
def test_a_state_directory_another_user_made_is_refused_not_taken_over(tmp_path):
    state = tmp_path / "state"
    open_store(state).close()  # a journal, as the other user's own lat-tui would leave it
    os.chmod(state, 0o777)
    os.chown(state, other_uid(), -1)
    out = lat(state, "status")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "owned by nobody" in out.stderr and "state directory of your own" in out.stderr
    assert state.stat().st_mode & 0o777 == 0o777 and state.stat().st_uid == other_uid()


@as_root
def test_a_file_another_user_put_in_the_state_directory_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    os.chmod(state, 0o777)
    (state / "journal.sqlite").write_bytes(b"")
    os.chown(state / "journal.sqlite", other_uid(), -1)
    out = lat(state, "status")
    assert out.returncode == 2 and "journal.sqlite" in out.stderr and "owned by nobody" in out.stderr


# ------------------------------------------------------------------ names and folders in configs
@pytest.mark.parametrize("field, value", [("name", "../../escape"), ("output_dir", "../../x"), ("output_dir", "/x")])
def test_a_config_naming_a_path_out_of_its_folder_stops_the_run(tmp_path, field, value):
    tree = tmp_path / "configs"
    (tree / "experiments").mkdir(parents=True)
    (tree / "suites").mkdir()
    shipped = yaml.safe_load((ROOT / "configs/experiments/gla/tiny_lora_qkvo.yaml").read_text())
    experiment = tree / "experiments" / "esc.yaml"
    experiment.write_text(yaml.safe_dump({**shipped, field: value, "train": {**shipped["train"], "max_steps": 1}}))
    (tree / "suites" / "esc.yaml").write_text("rounds: {1: [esc.yaml]}\n")
    out = lat(tmp_path / "state", "--configs", str(tree), "--suite", "esc", "--pairs", "1:tiny-sst2", "--gpus", "cpu",
              "--output-root", str(tmp_path / "runs" / "a"), cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert str(experiment) in out.stderr and f"field '{field}'" in out.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state" / "journal.sqlite").exists()


def test_plan_overrides_naming_a_path_are_a_plan_error(configs):
    from lat_core.errors import PlanError

    with pytest.raises(PlanError, match="field 'overrides.name'"):
        plan_for(configs, "runs", overrides={"name": "../escape"})
