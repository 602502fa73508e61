"""A fused member that cannot start, or fails at its first step or mid-run, fails alone with a
reason that names it (its own failed event, train.log line and exit record); the others train to
exactly the losses they have alone."""
import pytest

from lat_core.config.job import load_config
from lat_core.contract.jobdir import Failed, Finished, JobDir, Started, Step
from lat_core.train.fused.__main__ import main
from tests.helpers.fused import events_of, job_dir, run_alone, saved_tiny_base

GOOD = {"a": ({"r": 4, "alpha": 8}, {"batch_size": 8}, 3),
        "c": ({"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]}, {"batch_size": 6, "max_steps": 4}, 7)}
BAD = ({"r": 8, "alpha": 16}, {"batch_size": 4, "grad_accum": 2, "lr": 5e-3}, 5)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return saved_tiny_base(tmp_path_factory.mktemp("fused_fail") / "base")


@pytest.fixture(scope="module")
def alone(tmp_path_factory, base):
    """a's and c's step losses trained by the single-job trainer."""
    root = tmp_path_factory.mktemp("alone")
    return {name: run_alone(load_config(str(job_dir(root, name, base, dict(p), dict(t), s) / "job.yaml")))
            for name, (p, t, s) in GOOD.items()}


def group_of(root, base, peft=None, train=None):
    """Folders a, b, c; b with the given peft/train changes."""
    p, t, s = BAD
    b = job_dir(root, "b", base, {**p, **(peft or {})}, {**t, **(train or {})}, s)
    return [job_dir(root, "a", base, *map(dict, GOOD["a"][:2]), GOOD["a"][2]), b,
            job_dir(root, "c", base, *map(dict, GOOD["c"][:2]), GOOD["c"][2])]


def train_with_b_failing(dirs) -> None:
    assert main(["--attempt", "1", *map(str, dirs)]) == 1


def assert_others_trained_as_alone(dirs, alone) -> None:
    for d in (dirs[0], dirs[2]):
        assert JobDir(d).attempt(1).read_exit().returncode == 0 and events_of(d, Finished)
        mine = {e.step: e.loss for e in events_of(d, Step)}
        assert sorted(mine) == sorted(alone[d.name])
        assert all(mine[s] == pytest.approx(v, rel=1e-5) for s, v in alone[d.name].items()), d.name


def make_events_a_folder(b):
    (b / "events.jsonl").mkdir()


def make_data_unloadable(b):
    data = b / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"sentence": "fine", "label": 1}\nnot json\n')
    (data / "validation.jsonl").write_text('{"sentence": "fine", "label": 0}\n')
    (b / "job.yaml").write_text((b / "job.yaml").read_text().replace("data: tiny-sst2", f"data: {data}"))


# (b's peft, b's train, what breaks b's folder, b's exit code, what its reason says)
CANNOT_START = {
    "grad_accum its data cannot fill": (None, {"grad_accum": 500}, None, 2,
                                        "cannot fill grad_accum 500 micro-batches"),
    "an unwritable job folder": (None, None, make_events_a_folder, 1, "IsADirectoryError"),
    "a data file that does not load": (None, None, make_data_unloadable, 2, "train.jsonl:2: bad example"),
    "a target module the base lacks": ({"target_modules": ["q_proj", "nope_proj"]}, None, None, 2,
                                       "no linear module named 'nope_proj'"),
}


@pytest.mark.parametrize("case", list(CANNOT_START))
def test_a_member_that_cannot_start_fails_alone_with_its_reason(tmp_path, base, alone, capfd, case):
    peft, train, breaks, rc, reason = CANNOT_START[case]
    dirs = group_of(tmp_path, base, peft, train)
    if breaks:
        breaks(dirs[1])
    train_with_b_failing(dirs)
    b = dirs[1]
    assert JobDir(b).attempt(1).read_exit().returncode == rc
    assert f"error: {b}: " in capfd.readouterr().err and reason in (b / "train.log").read_text()
    if breaks is not make_events_a_folder:
        failed, = events_of(b, Failed)
        assert reason in failed.message or reason == failed.error_type
        assert not events_of(b, Started)
    assert_others_trained_as_alone(dirs, alone)


@pytest.mark.parametrize("steps", [1, 3], ids=["at its first step", "mid-run"])
def test_a_member_whose_own_end_fails_fails_alone(tmp_path, base, alone, steps):
    """b's folder cannot take its final adapter (a file where final/ goes): b fails when it ends,
    after one step or mid-run, while a and c train on."""
    dirs = group_of(tmp_path, base, train={"max_steps": steps})
    (dirs[1] / "final").write_text("not a folder\n")
    train_with_b_failing(dirs)
    b = dirs[1]
    assert JobDir(b).attempt(1).read_exit().returncode == 1
    failed, = events_of(b, Failed)
    assert failed.error_type == "FileExistsError" and "final" in failed.message
    assert [e.step for e in events_of(b, Step)] == list(range(1, steps + 1)) and not events_of(b, Finished)
    assert "error: FileExistsError" in (b / "train.log").read_text()
    assert_others_trained_as_alone(dirs, alone)


def test_when_no_member_can_start_each_fails_with_its_own_reason_and_the_group_ends(tmp_path, base):
    (pa, ta, sa), (pc, tc, sc) = GOOD["a"], GOOD["c"]
    b = group_of(tmp_path, base, peft={"target_modules": ["q_proj", "nope_proj"]})[1]
    a = job_dir(tmp_path, "a", base, dict(pa), {**ta, "grad_accum": 500}, sa)
    c = job_dir(tmp_path, "c", base, dict(pc), dict(tc), sc)
    make_data_unloadable(c)
    assert main(["--attempt", "1", str(a), str(b), str(c)]) == 2
    reasons = {a: "cannot fill grad_accum 500", b: "no linear module named 'nope_proj'", c: "train.jsonl:2: bad example"}
    for folder, reason in reasons.items():
        failed, = events_of(folder, Failed)
        assert reason in failed.message and JobDir(folder).attempt(1).read_exit().returncode == 2
        assert not any(other in failed.message for other in reasons.values() if other != reason)


def test_a_member_whose_checkpoint_cannot_be_restored_fails_alone_and_the_others_resume(tmp_path, base):
    """--resume: b's optimizer state is not a checkpoint's (a file cut short); b fails with it (a refused
    checkpoint: exit 2, as alone), a and
    c go on from step 3 to the losses they have alone (constant learning rate: a schedule that ends
    at max_steps would differ between the first run's 3 steps and the resumed run's)."""
    const = {"lr_scheduler": "constant"}
    dirs = group_of(tmp_path / "fused", base, train={**const, "max_steps": 3})
    for d in (dirs[0], dirs[2]):
        p, t, s = GOOD[d.name]
        job_dir(tmp_path / "fused", d.name, base, dict(p), {**t, **const, "max_steps": 3}, s)
    assert main([str(d) for d in dirs]) == 0
    for d in dirs:   # now each trains to its own max_steps, from its checkpoint-3
        p, t, s = GOOD.get(d.name, BAD)
        job_dir(tmp_path / "fused", d.name, base, dict(p), {**t, **const, "max_steps": 6 if d.name != "c" else 4}, s)
    state = dirs[1] / "checkpoint-3" / "optimizer.pt"
    state.write_bytes(state.read_bytes()[:100])   # a crash mid-write
    assert main(["--resume", "--attempt", "2", *map(str, dirs)]) == 1
    failed, = events_of(dirs[1], Failed)
    assert JobDir(dirs[1]).attempt(2).read_exit().returncode == 2 and failed.error_type == "TrainConfigError"
    assert "optimizer.pt: not a readable checkpoint file (damaged or cut short" in failed.message
    for d in (dirs[0], dirs[2]):
        p, t, s = GOOD[d.name]
        alone = run_alone(load_config(str(job_dir(tmp_path / "alone", d.name, base, dict(p), {**t, **const}, s)
                                          / "job.yaml")))
        started = events_of(d, Started)[-1]
        assert started.resumed_from == 3 and JobDir(d).attempt(2).read_exit().returncode == 0
        resumed = {e.step: e.loss for e in events_of(d, Step) if e.t >= started.t}
        assert sorted(resumed) == [s for s in sorted(alone) if s > 3]
        assert all(resumed[s] == pytest.approx(alone[s], rel=1e-5) for s in resumed), d.name
