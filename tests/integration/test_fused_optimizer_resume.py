"""A fused member's checkpoint under the group's one AdamW (lat_core/train/fused/group_adamw.py) and
a job alone's are one format: a member requeued alone resumes from its group checkpoint, and a job
alone's checkpoint resumes in a group beside fresh members, each going on as the uninterrupted job
alone does (the single-job trainer, loop.run)."""
import pytest
import torch

from lat_core.config.job import load_config
from lat_core.contract.jobdir import JobDir, Started, Step
from lat_core.train.fused.__main__ import main
from lat_core.train.fused.group import build_group
from tests.helpers.fused import events_of, job_dir, run_alone, saved_tiny_base
from tests.unit.train.test_fused_group import train_fused

# a's schedule is constant, so a run of 3 steps resumed to 6 has an uninterrupted run's rates
MEMBERS = {"a": ({"r": 4, "alpha": 8}, {"batch_size": 8, "lr": 5e-3, "lr_scheduler": "constant",
                                        "weight_decay": 0.01}, 3),
           "b": ({"r": 8, "alpha": 16}, {"batch_size": 4, "grad_accum": 2, "lr": 5e-3}, 5),
           "c": ({"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]}, {"batch_size": 6, "max_steps": 4}, 7)}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return saved_tiny_base(tmp_path_factory.mktemp("fused_opt") / "base")


def _folder(root, name, base, **train):
    peft, own, seed = MEMBERS[name]
    return job_dir(root, name, base, peft=dict(peft), train={**own, **train}, seed=seed)


def _uninterrupted(root, base) -> dict[int, float]:
    return run_alone(load_config(_folder(root, "a", base) / "job.yaml"))


def _to_six_steps(folder) -> None:
    (folder / "job.yaml").write_text((folder / "job.yaml").read_text().replace("max_steps: 3", "max_steps: 6"))


def test_a_member_requeued_alone_resumes_from_its_group_checkpoint(tmp_path, base):
    from lat_core.train.loop import run
    whole = _uninterrupted(tmp_path / "whole", base)
    group = [_folder(tmp_path / "group", n, base, **({"max_steps": 3} if n == "a" else {})) for n in MEMBERS]
    assert main([str(d) for d in group]) == 0
    a = group[0]
    assert "optimizer: one AdamW step for the group's 3 members" in (a / "train.log").read_text()
    assert (a / "checkpoint-3/optimizer.pt").is_file()
    _to_six_steps(a)
    with JobDir(a).event_writer() as ev:   # the single-job trainer, as a requeued job runs alone
        run(load_config(a / "job.yaml"), ev, resume=True, argv=["--cfg", "x.yaml"])
    started = events_of(a, Started)[-1]
    assert started.resumed_from == 3 and started.optimizer_state == "restored" and started.fused_group is None
    resumed = {e.step: e.loss for e in events_of(a, Step) if e.t >= started.t}
    assert sorted(resumed) == [4, 5, 6]
    for step, loss in resumed.items():
        assert loss == pytest.approx(whole[step], rel=1e-5), step


def test_a_job_alones_checkpoint_resumes_in_a_group_beside_fresh_members(tmp_path, base):
    whole = _uninterrupted(tmp_path / "whole", base)
    a = _folder(tmp_path / "group", "a", base, max_steps=3)
    run_alone(load_config(a / "job.yaml"))
    assert (a / "checkpoint-3/optimizer.pt").is_file()
    _to_six_steps(a)
    cfgs = [load_config(a / "job.yaml")] + [load_config(_folder(tmp_path / "group", n, base) / "job.yaml")
                                            for n in ("b", "c")]
    group = build_group(cfgs, torch.device("cpu"), resume=[True, False, False])
    assert group.data[0].resumed["optimizer_restored"] and group.runs[0].step == 3
    curves = train_fused(group)
    assert sorted(curves[0]) == [4, 5, 6] and sorted(curves[1]) == list(range(1, 7))
    for step, loss in curves[0].items():
        assert loss == pytest.approx(whole[step], rel=1e-5), step
