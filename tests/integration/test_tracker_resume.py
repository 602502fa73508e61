"""One tracker run per job (lat_core/train/tracker_run.py): a job that died past its last checkpoint and
resumed is one W&B run (one id, its offline folders one per attempt, which `wandb sync` joins) and one
TensorBoard curve whose steps go on without a gap or a duplicate; a fresh start is a new run and says
so.  Real tiny training on the CPU, alone and as a fused member, read back with the trackers' readers."""
import os
import subprocess
import sys
import time

import pytest

from lat_core.contract.jobdir import JobDir, Step, TrackerRunOpened
from lat_core.train.fused.__main__ import main as fused_main
from lat_core.train.tracking import run_naming
from tests.helpers.fused import ROOT, events_of, job_dir, saved_tiny_base
from tests.helpers.trackers import TRACKER_VARS, tensorboard_scalars, wandb_runs
from tests.helpers.waits import HANG_S

KILL_AT = 5   # past checkpoint-3 (save_every 3, max_steps 6): the resume trains steps 4 and 5 again
STEPS = [1, 2, 3, 4, 5, 6]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return saved_tiny_base(tmp_path_factory.mktemp("tracked") / "base")


@pytest.fixture
def tracker_env():
    """W&B offline, no tracker settings from outside; the environment as it was after."""
    saved = dict(os.environ)
    for name in (*TRACKER_VARS, "WANDB_RUN_ID", "WANDB_RESUME"):
        os.environ.pop(name, None)
    os.environ.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    yield
    os.environ.clear()
    os.environ.update(saved)


def killed(mode: str, pids, *argv) -> None:
    """The trainer dead after its trackers got step KILL_AT (alone: crashed; fused: SIGKILL);
    returns once its children are gone."""
    done = subprocess.run([sys.executable, "-m", "tests.helpers.killed_trainer", str(KILL_AT), mode, str(pids), *argv],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=HANG_S)
    assert done.returncode == {"alone": 1, "fused": -9}[mode], done.stderr[-3000:]
    deadline = time.time() + HANG_S
    for pid in map(int, pids.read_text().split()):
        while os.path.exists(f"/proc/{pid}") and "zombie" not in _state(pid):
            assert time.time() < deadline, f"{pid} still runs"
            time.sleep(0.2)


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/status").read()
    except OSError:
        return "zombie"


def train(d, *flags) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "lat_core.train", "--cfg", str(d / "job.yaml"), *flags],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def logged(runs, key: str) -> list[int]:
    """The train/global_step of each history row with ``key``, across the run's folders in order."""
    return [row["train/global_step"] for run in runs for row in run["history"] if key in row]


def check_one_run(d, name: str) -> str:
    """The job's W&B run and TensorBoard curve after a kill at KILL_AT and a resume: one run."""
    first, again = events_of(d, TrackerRunOpened)
    assert not first.continued and again.continued and first.id == again.id
    assert again.held == {"step": KILL_AT, "eval": 3}
    assert JobDir(d).tracker_run_id() == first.id
    runs = wandb_runs(d)
    assert [r["id"] for r in runs] == [first.id] * 2 and runs[1]["name"] == runs[0]["name"]
    assert logged(runs, "train/loss") == STEPS             # 4 and 5 are trained again, not logged again
    assert logged(runs, "eval/validation_accuracy") == [3, 6]
    assert [r["exit_code"] for r in runs] == [1, 0]         # the crashed or killed attempt closed as failed
    tb = tensorboard_scalars(d / "tensorboard" / name)
    assert [s for s, _ in tb["train/loss"]] == STEPS and [s for s, _ in tb["eval/validation_accuracy"]] == [3, 6]
    steps = [e.step for e in events_of(d, Step)]
    assert steps == [1, 2, 3, 4, 5, 4, 5, 6]               # the job's own events keep what it trained
    return first.id


def test_a_job_resumed_after_a_kill_is_one_tracker_run_and_a_fresh_start_a_new_one(tmp_path, base, tracker_env):
    d = job_dir(tmp_path, "a", base, train={"report_to": ["wandb", "tensorboard"]}, seed=3)
    name = run_naming("a", 3, "tiny-sst2").folder()
    killed("alone", tmp_path / "pids", "--cfg", str(d / "job.yaml"))
    resumed = train(d, "--resume")
    run_id = check_one_run(d, name)
    assert f"tracker run {run_id} (wandb, tensorboard): continued" in resumed.stdout

    fresh = train(d, "--overwrite")
    new, = events_of(d, TrackerRunOpened)                   # --overwrite cleared the earlier events
    assert not new.continued and new.replaced == run_id and new.id != run_id
    assert JobDir(d).tracker_run_id() == new.id
    assert f"the earlier run {run_id} is not continued" in fresh.stdout
    runs = wandb_runs(d)
    assert [r["id"] for r in runs] == [run_id, run_id, new.id] and logged(runs[2:], "train/loss") == STEPS
    tb = tensorboard_scalars(d / "tensorboard" / name)     # the earlier run's events hidden
    assert tb["train/loss"] == [(e.step, pytest.approx(e.loss)) for e in events_of(d, Step)]


def test_a_fused_member_resumed_after_a_kill_is_one_tracker_run(tmp_path, base, tracker_env):
    d = job_dir(tmp_path, "a", base, train={"report_to": ["wandb", "tensorboard"]}, seed=3)
    killed("fused", tmp_path / "pids", "--attempt", "1", str(d))
    assert fused_main(["--resume", "--attempt", "2", str(d)]) == 0
    run_id = check_one_run(d, run_naming("a", 3, "tiny-sst2").folder())
    assert f"tracker run {run_id} (wandb, tensorboard): continued" in (d / "train.log").read_text()
