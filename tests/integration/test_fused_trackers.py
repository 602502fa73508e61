"""A fused member's tracker runs (lat_core/train/fused/trackers.py): each member of a group gets the
run its job alone gets (name, group, tags, config, keys, step axis), written while the group trains,
read back with the trackers' own readers; a member that leaves closes its run with its state."""
import json
import time
import os
import subprocess
import sys

import pytest

from lat_core.config.job import load_config
from lat_core.contract.jobdir import Eval, Failed, Finished, JobDir, Started, Step
from lat_core.train.fused.__main__ import main
from lat_core.train.tracking import run_naming
from tests.helpers.fused import ROOT, events_of, job_dir, run_alone, saved_tiny_base
from tests.helpers.trackers import TRACKER_VARS, tensorboard_scalars, tensorboard_text, wandb_runs
from tests.helpers.waits import HANG_S

SUITE = "gla_adapters"
MEMBERS = {"a": ({"r": 4, "alpha": 8}, {"batch_size": 8, "log_every": 2}, 3),
           "b": ({"r": 8, "alpha": 16}, {"batch_size": 4, "grad_accum": 2, "lr": 5e-3}, 5),
           "c": ({"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]}, {"batch_size": 6, "max_steps": 4}, 7)}
# the Trainer's gradient norm: a fused member's step computes none (the one key its run lacks)
NOT_FUSED = {"train/grad_norm"}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return saved_tiny_base(tmp_path_factory.mktemp("fused") / "base")


@pytest.fixture
def tracker_env():
    """No tracker settings from outside; the engine's LAT_SUITE; the environment as it was after
    (a job alone run in this process sets the trackers' defaults in os.environ)."""
    saved = dict(os.environ)
    for name in TRACKER_VARS:
        os.environ.pop(name, None)
    os.environ.update({"LAT_SUITE": SUITE, "WANDB_SILENT": "true"})
    yield
    os.environ.clear()
    os.environ.update(saved)


def folders(root, base, report_to, **train_over):
    return [job_dir(root, n, base, peft=dict(p), train={**t, "report_to": report_to, **train_over.get(n, {})}, seed=s)
            for n, (p, t, s) in MEMBERS.items()]


def naming(d):
    return run_naming(d.name, MEMBERS[d.name][2], "tiny-sst2", SUITE)


def step_losses(d) -> dict[int, float]:
    return {e.step: e.loss for e in events_of(d, Step)}


def test_each_member_gets_the_tensorboard_run_its_job_alone_gets(tmp_path, base, tracker_env):
    dirs = folders(tmp_path / "fused", base, ["tensorboard"])
    assert main(["--attempt", "1", *map(str, dirs)]) == 0
    for d in dirs:
        run = d / "tensorboard" / naming(d).folder()
        scalars = tensorboard_scalars(run)
        assert events_of(d, Started)[0].report_to == ("tensorboard",)
        assert json.loads(tensorboard_text(run, "args/text_summary"))["run_name"] == naming(d).name
        losses = dict(scalars["train/loss"])
        assert sorted(losses) == sorted(step_losses(d))
        if MEMBERS[d.name][1].get("log_every", 1) == 1:   # else the mean since the last log, as alone
            assert losses == pytest.approx(step_losses(d), rel=1e-6)
        assert scalars["eval/validation_accuracy"] == [
            (e.step, pytest.approx(e.metrics["accuracy"])) for e in events_of(d, Eval)]
    # member a logs every 2 steps: its run equals the one the same job alone writes, key by key
    a = dirs[0]
    alone = load_config(str(job_dir(tmp_path / "alone", "a", base, peft=dict(MEMBERS["a"][0]),
                                    train={**MEMBERS["a"][1], "report_to": ["tensorboard"]}, seed=3) / "job.yaml"))
    run_alone(alone)
    theirs = tensorboard_scalars(alone.output_dir / "tensorboard" / naming(a).folder())
    ours = tensorboard_scalars(a / "tensorboard" / naming(a).folder())
    assert set(ours) == set(theirs) - NOT_FUSED
    for tag, points in ours.items():
        assert [s for s, _ in points] == [s for s, _ in theirs[tag]], tag
    for tag in ("train/loss", "train/learning_rate", "train/epoch", "train/train_loss", "train/total_flos",
                "eval/validation_accuracy", "eval/validation_loss"):
        assert [v for _, v in ours[tag]] == pytest.approx([v for _, v in theirs[tag]], rel=1e-5), tag


def test_each_member_gets_its_wandb_run_and_closes_it_with_its_own_end(tmp_path, base, tracker_env):
    """Offline W&B: a finishes, b fails (its loss turns non-finite after step 1), c is cancelled
    before its first step; each run holds its own curve and ends with its member's state."""
    os.environ["WANDB_MODE"] = "offline"
    dirs = folders(tmp_path, base, ["wandb"], b={"lr": 1e30})
    JobDir(dirs[2]).request_cancel(time.time())
    assert main(["--attempt", "1", *map(str, dirs)]) == 1
    assert {d.name: JobDir(d).attempt(1).read_exit().returncode for d in dirs} == {"a": 0, "b": 1, "c": -15}
    exit_codes = {}
    for d in dirs:
        run, = wandb_runs(d)   # its own run, in its own folder (WANDB_DIR: the job's output dir, as alone)
        assert (run["name"], run["group"]) == (naming(d).name, naming(d).group)
        assert set(run["tags"]) == set(naming(d).tags)
        assert run["config"]["lat"]["name"] == d.name and run["config"]["run_name"] == naming(d).name
        logged = {row["train/global_step"]: row["train/loss"] for row in run["history"] if "train/loss" in row}
        if d.name != "a":   # a logs every 2 steps (the mean since its last log)
            assert logged == pytest.approx(step_losses(d), rel=1e-6)
        exit_codes[d.name] = run["exit_code"]
    assert exit_codes == {"a": 0, "b": 1, "c": 143}
    assert sorted(step_losses(dirs[0])) == [1, 2, 4, 6] and events_of(dirs[0], Finished)
    assert sorted(step_losses(dirs[1])) == [1]


def test_a_tracker_not_installed_is_the_members_own_note_or_config_error(tmp_path, base, tracker_env, monkeypatch):
    """As alone: wandb asked for and missing fails that member (exit 2, before training); a missing
    TensorBoard is a note in its log and the member trains."""
    monkeypatch.setitem(sys.modules, "wandb", None)                     # import wandb: ImportError
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    a, b, _ = folders(tmp_path, base, ["tensorboard"], a={"report_to": ["wandb"]})
    assert main(["--attempt", "1", str(a), str(b)]) == 1
    assert JobDir(a).attempt(1).read_exit().returncode == 2 and not events_of(a, Step)
    failed, = events_of(a, Failed)
    assert "wandb package is not installed" in failed.message
    assert "wandb package is not installed" in (a / "train.log").read_text()
    assert JobDir(b).attempt(1).read_exit().returncode == 0
    assert events_of(b, Started)[0].report_to == ()
    assert "report_to tensorboard skipped" in (b / "train.log").read_text()
    assert not (b / "tensorboard").exists()


def test_a_tracker_writer_that_dies_fails_its_member_and_the_others_go_on(tmp_path, base, tracker_env):
    """TensorBoard cannot make its log folder (the user's TENSORBOARD_LOGGING_DIR lies under a
    file): the job alone fails at the start of training; the member fails with the reason."""
    (tmp_path / "a-file").write_text("")
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(tmp_path / "a-file" / "tb")
    a, b, _ = folders(tmp_path, base, [], a={"report_to": ["tensorboard"]})
    assert main(["--attempt", "1", str(a), str(b)]) == 1
    assert JobDir(a).attempt(1).read_exit().returncode == 1
    failed, = events_of(a, Failed)
    assert failed.error_type == "TrackerWriterError" and "tensorboard" in failed.message
    assert "tracker runs (tensorboard): the writer exited with 1" in (a / "train.log").read_text()
    assert JobDir(b).attempt(1).read_exit().returncode == 0 and sorted(step_losses(b)) == [1, 2, 3, 4, 5, 6]


def test_a_member_waits_for_a_live_tracker_writer_however_long_it_takes(tmp_path, base, tracker_env, monkeypatch):
    """On a loaded machine a writer's imports alone take minutes (a CI run at load 10-16 failed a
    member whose writer had not opened its runs 120 s after the member finished). Every timed wait
    for a writer answers "not yet" here, as a deadline that passed would: the member still finishes
    once its writer opened the runs, and the writer closes them before the group ends."""
    import select
    from lat_core.train.fused.trackers import MemberTrackers
    writers: list[subprocess.Popen] = []
    begin, real_select = MemberTrackers.begin, select.select

    def begin_and_keep(self, *args, **kwargs):
        begin(self, *args, **kwargs)
        if self.proc is None:   # no tracker asked for: no writer
            return
        writers.append(self.proc)
        real_wait = self.proc.wait
        self.proc.wait = lambda timeout=None: real_wait() if timeout is None else _timed_out(timeout)

    def _timed_out(timeout):
        raise subprocess.TimeoutExpired("the tracker writer", timeout)

    def select_not_yet(rlist, wlist, xlist, timeout=None):
        if any(f is w.stdout for f in rlist for w in writers):
            return [], [], []
        return real_select(rlist, wlist, xlist, timeout)

    monkeypatch.setattr(MemberTrackers, "begin", begin_and_keep)
    monkeypatch.setattr(select, "select", select_not_yet)
    a, b, _ = folders(tmp_path, base, [], a={"report_to": ["tensorboard"]})
    assert main(["--attempt", "1", str(a), str(b)]) == 0
    assert writers and JobDir(a).attempt(1).read_exit().returncode == 0
    assert "train/train_loss" in tensorboard_scalars(a / "tensorboard" / naming(a).folder())   # the summary, after ready
    assert "the writer" not in (a / "train.log").read_text()   # neither failed nor stopped


def test_runs_of_a_group_that_dies_close_as_crashed(tmp_path, base, tracker_env):
    """The writer alone (python -m lat_core.train.fused.trackers): its stdin closes without "end",
    as when the group process is killed; the W&B run holds what was logged and ends failed."""
    os.environ["WANDB_MODE"] = "offline"
    d = job_dir(tmp_path, "a", base, train={"report_to": ["wandb"]}, seed=3)
    env = {**os.environ, "WANDB_DIR": str(d), "PYTHONPATH": str(ROOT)}
    begin = {"job_yaml": str(d / "job.yaml"), "report_to": ["wandb"], "run_name": "a@3:tiny-sst2", "max_steps": 6,
             "start": 0, "model_config": {"model_type": "gla"}, "peft_config": {"default": {"r": 8}},
             "num_parameters": 10, "trainable_parameters": 2, "device": "cpu", "train_examples": 200,
             "tracker_run": {"id": "a3", "continued": False}}
    lines = [{"begin": begin}, {"step": 1, "logs": {"loss": 3.5, "epoch": 1 / 6}},
             {"step": 2, "logs": {"loss": 3.25, "epoch": 2 / 6}}]
    done = subprocess.run([sys.executable, "-m", "lat_core.train.fused.trackers"], env=env, cwd=ROOT, timeout=HANG_S,
                          input="".join(json.dumps(x) + "\n" for x in lines), capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "ready\n", done.stderr
    run, = wandb_runs(d)
    assert run["name"] == "a@3:tiny-sst2" and run["exit_code"] == 1
    assert {r["train/global_step"]: r["train/loss"] for r in run["history"]} == {1: 3.5, 2: 3.25}


def test_a_tracker_writer_is_titled_with_its_member(tmp_path, base, tracker_env):
    """ps names the member whose runs a writer holds (`lat tracker: <the job's table name>`)."""
    from lat_core.titles import job_label
    d = job_dir(tmp_path, "a", base, train={"report_to": ["tensorboard"]}, seed=3)
    begin = {"job_yaml": str(d / "job.yaml"), "report_to": ["tensorboard"], "run_name": "a@3:tiny-sst2",
             "max_steps": 6, "start": 0, "model_config": {"model_type": "gla"}, "peft_config": {"default": {"r": 8}},
             "num_parameters": 10, "trainable_parameters": 2, "device": "cpu", "train_examples": 200,
             "tracker_run": {"id": "a3", "continued": False}}
    writer = subprocess.Popen([sys.executable, "-m", "lat_core.train.fused.trackers"], cwd=ROOT, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    try:
        writer.stdin.write(json.dumps({"begin": begin}) + "\n")
        writer.stdin.flush()
        assert writer.stdout.readline() == "ready\n"
        title = open(f"/proc/{writer.pid}/cmdline").read().replace("\0", " ").strip()
        assert title == f"lat tracker: {job_label(d / 'job.yaml')}" and "tiny-sst2" in title, title
    finally:
        writer.stdin.close()
        writer.wait(timeout=HANG_S)
