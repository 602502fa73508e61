"""SIGUSR1 to a fused group (Slurm's warning before its time limit, forwarded by the runner): every
member saves a checkpoint at its last finished step and leaves with exit 75 to be resumed, as a job
alone does (lat_core.train.save_request); ``--resume`` trains each member on from its own checkpoint."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lat_core.contract.jobdir import CheckpointSaved, Finished, JobDir, Started, Step
from lat_core.contract.jobdir.outcome import EXIT_SAVED_TO_RESUME
from tests.helpers.fused import events_of, job_dir, saved_tiny_base
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
LONG = {"max_steps": 100000, "eval_every": 100000, "save_every": 100000, "log_every": 1}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return saved_tiny_base(tmp_path_factory.mktemp("fused_usr1") / "base")


def fused(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lat_core.train.fused", *map(str, args)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def steps(folder: Path) -> int:
    return len(events_of(folder, Step)) if JobDir(folder).events_path.is_file() else 0


def test_sigusr1_saves_every_member_to_be_resumed_and_resume_trains_on(tmp_path, base):
    dirs = [job_dir(tmp_path, "a", base, {"r": 4, "alpha": 8}, dict(LONG), 3),
            job_dir(tmp_path, "b", base, {"r": 8, "alpha": 16}, {**LONG, "batch_size": 4, "grad_accum": 2}, 5)]
    group = fused("--attempt", 1, *dirs)
    deadline = time.time() + HANG_S
    while not all(steps(d) >= 2 for d in dirs):
        assert group.poll() is None and time.time() < deadline, group.stdout.read() if group.poll() is not None else ""
        time.sleep(0.2)
    group.send_signal(signal.SIGUSR1)
    out, _ = group.communicate(timeout=HANG_S)
    assert group.returncode == EXIT_SAVED_TO_RESUME, out
    saved = {}
    for d in dirs:
        assert JobDir(d).attempt(1).read_exit().returncode == EXIT_SAVED_TO_RESUME
        [checkpoint] = events_of(d, CheckpointSaved)
        saved[d] = checkpoint.step
        assert checkpoint.step >= 2 and (d / f"checkpoint-{checkpoint.step}").is_dir()
        assert checkpoint.step == max(e.step for e in events_of(d, Step))  # its last finished step
        log = (d / "train.log").read_text()
        assert f"asked to save and stop (SIGUSR1): checkpoint at step {checkpoint.step}" in log
        assert f"left the group: saved at step {checkpoint.step} to be resumed (exit 75)" in log
        assert not events_of(d, Finished)
    for d in dirs:  # two more steps each, from where each saved
        raw = yaml.safe_load((d / "job.yaml").read_text())
        raw["train"]["max_steps"] = saved[d] + 2
        (d / "job.yaml").write_text(yaml.safe_dump(raw))
    resumed = fused("--resume", "--attempt", 2, *dirs)
    out, _ = resumed.communicate(timeout=HANG_S)
    assert resumed.returncode == 0, out
    for d in dirs:
        assert [e.resumed_from for e in events_of(d, Started)] == [None, saved[d]]
        assert events_of(d, Finished)[-1].steps == saved[d] + 2
        assert JobDir(d).attempt(2).read_exit().returncode == 0
