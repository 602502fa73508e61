"""The fused group runner (python -m lat_core.train.fused): members write what a job of its own
writes and get its losses and metrics; a member resumes from its checkpoint; a failing or
cancelled member leaves the group and the others finish."""
import json
import subprocess
import sys
import time

import pytest
import torch

from lat_core.config.job import load_config
from lat_core.contract.jobdir import Eval, Failed, Finished, JobDir, SpeedMode, Started, Step
from lat_core.train.fused.__main__ import main, open_members, parse_args, start_group
from lat_core.train.fused.runner import train_group
from tests.helpers.fused import events_of, job_dir, run_alone, saved_tiny_base
from tests.helpers.waits import HANG_S

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
MEMBERS = {"a": ({"r": 4, "alpha": 8}, {"batch_size": 8}, 3),
           "b": ({"r": 8, "alpha": 16}, {"batch_size": 4, "grad_accum": 2, "lr": 5e-3}, 5),
           "c": ({"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]}, {"batch_size": 6, "max_steps": 4}, 7)}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return saved_tiny_base(tmp_path_factory.mktemp("fused") / "base")


def folders(root, base, **train_over):
    return [job_dir(root, n, base, peft=dict(p), train={**t, **train_over.get(n, {})}, seed=s)
            for n, (p, t, s) in MEMBERS.items()]


def test_group_writes_each_members_files_and_matches_single_jobs(tmp_path, base):
    dirs = folders(tmp_path / "fused", base)
    assert main(["--attempt", "1", *map(str, dirs)]) == 0
    for d in dirs:
        alone_cfg = load_config(str(job_dir(tmp_path / "alone", d.name, base, peft=dict(MEMBERS[d.name][0]),
                                            train=dict(MEMBERS[d.name][1]), seed=MEMBERS[d.name][2]) / "job.yaml"))
        alone = run_alone(alone_cfg)
        mine = {e.step: e.loss for e in events_of(d, Step)}
        assert sorted(mine) == sorted(alone)
        assert all(mine[s] == pytest.approx(v, rel=1e-5) for s, v in alone.items())
        theirs = events_of(alone_cfg.output_dir, Eval)
        ours = events_of(d, Eval)
        assert [(e.step, e.split) for e in ours] == [(e.step, e.split) for e in theirs]
        for e, f in zip(ours, theirs):
            assert e.metrics["accuracy"] == f.metrics["accuracy"]
            assert e.metrics["loss"] == pytest.approx(f.metrics["loss"], rel=1e-5)
        ours_started, theirs_started = events_of(d, Started)[0], events_of(alone_cfg.output_dir, Started)[0]
        assert ours_started.pack == SpeedMode("auto", True, "one row a pass, fla varlen (cu_seqlens)")
        for key in ("trainable_params", "total_params", "max_steps", "batch_size", "grad_accum", "seed",
                    "lr_scheduler", "warmup_steps", "train_examples", "logits_to_keep", "effective_batch_size"):
            assert getattr(ours_started, key) == getattr(theirs_started, key), key
        # where the start-up went, as a job alone's says (the group's phases: every member waited for them)
        assert set(ours_started.setup_s) == {"imports", "members", "data", "model", "adapter"}
        assert set(theirs_started.setup_s) >= {"imports", "data", "model", "adapter"}
        assert all(v >= 0 for v in ours_started.setup_s.values())
        names = [e.kind for e in events_of(d)]
        assert names[0] == "started" and names[-2:] == ["memory", "finished"]
        last = MEMBERS[d.name][1].get("max_steps", 6)
        kept = sorted(p.name for p in d.glob("checkpoint-*"))   # the last and the best, as alone
        assert kept == sorted(p.name for p in alone_cfg.output_dir.glob("checkpoint-*"))
        assert f"checkpoint-{last}" in kept
        ckpt = d / f"checkpoint-{last}"
        assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == last
        assert (ckpt / "optimizer.pt").is_file() and (d / "final/adapter_model.safetensors").is_file()
        assert (d / "best").is_dir() and (d / "env.json").is_file()
        assert f"step {last}/{last} loss" in (d / "train.log").read_text()
        assert JobDir(d).attempt(1).read_exit().returncode == 0
        # the member's saved adapter is the single job's format: same keys, same optimizer state layout
        ours_opt = torch.load(ckpt / "optimizer.pt", weights_only=True)
        theirs_opt = torch.load(alone_cfg.output_dir / f"checkpoint-{last}/optimizer.pt", weights_only=True)
        assert ours_opt["state"].keys() == theirs_opt["state"].keys()
        for k, st in ours_opt["state"].items():
            torch.testing.assert_close(st["exp_avg"], theirs_opt["state"][k]["exp_avg"], rtol=1e-4, atol=1e-8)


def _evals(d):
    return [(e.step, e.split, e.metrics) for e in events_of(d, Eval)]


def test_members_due_together_evaluate_in_one_pass_with_their_own_results(tmp_path, base, monkeypatch):
    """Same batch size: a and b evaluate at step 2, 4 and 6 in shared passes, c (4 steps) with
    them at 2 and 4 and alone at its end; every member's metrics, predictions and best equal its
    single-job run's."""
    from lat_core.train.fused import evaluation
    copies = []
    real = evaluation.evaluate_cls_copies
    monkeypatch.setattr(evaluation, "evaluate_cls_copies", lambda *a, **k: copies.append(k["copies"]) or real(*a, **k))
    same = {"batch_size": 8, "eval_every": 2}
    dirs = folders(tmp_path / "fused", base, a=same, b=same, c=same)
    assert main([str(d) for d in dirs]) == 0
    assert copies == [3, 3, 2]   # step 2 and 4: a, b, c; step 6: a and b; c's last (4) shared too
    for d in dirs:
        p, t, seed = MEMBERS[d.name]
        alone = load_config(str(job_dir(tmp_path / "alone", d.name, base, peft=dict(p), train={**t, **same},
                                        seed=seed) / "job.yaml"))
        run_alone(alone)
        ours, theirs = _evals(d), _evals(alone.output_dir)
        assert [(s, sp) for s, sp, _ in ours] == [(s, sp) for s, sp, _ in theirs] and ours
        for (_, _, mine), (_, _, want) in zip(ours, theirs):
            assert mine["accuracy"] == want["accuracy"] and mine["loss"] == pytest.approx(want["loss"], rel=1e-5)
        step = ours[-1][0]
        assert (d / f"predictions/step-{step}-validation.jsonl").read_text() == \
            (alone.output_dir / f"predictions/step-{step}-validation.jsonl").read_text()


def test_a_shared_evaluation_that_fails_falls_back_to_each_member_alone(tmp_path, base, monkeypatch, capfd):
    from lat_core.train.fused import evaluation

    def broken(*_a, **_k):
        raise RuntimeError("shared pass broke")
    monkeypatch.setattr(evaluation, "_evaluate_together", broken)
    same = {"batch_size": 8}
    dirs = folders(tmp_path, base, a=same, b=same, c=same)
    assert main(["--attempt", "1", *map(str, dirs)]) == 0
    assert all(JobDir(d).attempt(1).read_exit().returncode == 0 and _evals(d) for d in dirs)
    assert "evaluation of 3 members in one pass failed (RuntimeError: shared pass broke); each evaluates alone" \
        in capfd.readouterr().out   # the group's own lines: its first member's train.log when launched


def test_a_plain_logging_steps_event_is_written_after_the_next_pass_is_queued(tmp_path, base, monkeypatch):
    """Reading a step's loss waits for the GPU: a step that only logs writes its event once the next
    pass is queued; a step that evaluates, saves or ends writes it at once, before its other events."""
    from lat_core.train.fused import runner
    order = []
    real_step, real_write = runner.micro_step, runner.write_step_log

    def micro_step(*a, **k):
        order.append("pass")
        return real_step(*a, **k)

    def write_step_log(m):
        if m.pending is not None:
            order.append((m.run.cfg.name, m.pending.step))
        real_write(m)
    real_evaluate = runner.evaluate_together

    def evaluate_together(group, stepped):
        due = sorted({m.run.step for m in stepped if runner.eval_due(m)})
        if due:
            order.append(("evaluation", *due))
        return real_evaluate(group, stepped)
    monkeypatch.setattr(runner, "micro_step", micro_step)
    monkeypatch.setattr(runner, "write_step_log", write_step_log)
    monkeypatch.setattr(runner, "evaluate_together", evaluate_together)
    dirs = folders(tmp_path, base, a={"batch_size": 8}, b={"batch_size": 8, "grad_accum": 1},
                   c={"batch_size": 8, "max_steps": 6})
    group, members = start_group(*open_members(parse_args([str(d) for d in dirs]), []), False)
    train_group(group, members)
    passes_before = {entry: order[:i].count("pass") for i, entry in enumerate(order) if entry != "pass"}
    for name in "abc":   # one step a pass; evaluation and checkpoints at 3 and 6 (the last)
        assert [passes_before[(name, s)] for s in range(1, 7)] == [2, 3, 3, 5, 6, 6]
    # the step events of an evaluating step come before the group's evaluation (the Trainer logs, then
    # evaluates), so an event's time is its step's end: throughput windows do not take in the evaluation
    evaluations = [i for i, entry in enumerate(order) if entry[0] == "evaluation"]
    assert [order[i] for i in evaluations] == [("evaluation", 3), ("evaluation", 6)]
    for name in "abc":
        assert order.index((name, 3)) < evaluations[0] and order.index((name, 6)) < evaluations[1]
    for d in dirs:   # each step event before its step's evaluation and checkpoint; failed/finished last
        names = [(e.kind, getattr(e, "step", None)) for e in events_of(d) if e.kind in ("step", "eval", "checkpoint")]
        assert names[:4] == [("step", 1), ("step", 2), ("step", 3), ("eval", 3)]
        assert [e.kind for e in events_of(d)][-1] == "finished"


def test_member_resumes_from_its_checkpoint(tmp_path, base):
    whole = folders(tmp_path / "whole", base, a={"lr_scheduler": "constant"})
    assert main([str(d) for d in whole]) == 0
    part = folders(tmp_path / "part", base, a={"max_steps": 3})
    assert main([str(d) for d in part]) == 0
    a = part[0]
    raw = (a / "job.yaml").read_text().replace("max_steps: 3", "max_steps: 6")
    (a / "job.yaml").write_text(raw)
    assert main(["--resume", str(a)]) == 0
    started = events_of(a, Started)[-1]
    assert started.resumed_from == 3 and started.optimizer_state == "restored"
    resumed = {e.step: e.loss for e in events_of(a, Step) if e.t >= started.t}
    uninterrupted = {e.step: e.loss for e in events_of(whole[0], Step)}
    assert sorted(resumed) == [4, 5, 6]
    assert all(resumed[s] == pytest.approx(uninterrupted[s], rel=1e-5) for s in resumed)


def test_failing_members_leave_and_the_others_finish(tmp_path, base):
    dirs = folders(tmp_path, base, b={"lr": 1e30})      # b's loss turns non-finite after its first step
    args = parse_args(["--attempt", "1", *map(str, dirs)])
    cfgs, outs = open_members(args, [])
    group, members = start_group(cfgs, outs, False)
    for ex in group.runs[2].train_ex[:]:                # c: a label its dataset does not have
        ex["label"] = 9
    train_group(group, members)
    rc = {d.name: JobDir(d).attempt(1).read_exit().returncode for d in dirs}
    assert rc == {"a": 0, "b": 1, "c": 1}
    failed_b, = events_of(dirs[1], Failed)
    assert failed_b.error_type == "FloatingPointError"
    assert events_of(dirs[2], Failed)[0].error_type == "IndexError" and not events_of(dirs[2], Step)
    assert [e.step for e in events_of(dirs[0], Step)] == [1, 2, 3, 4, 5, 6]
    assert events_of(dirs[0], Finished)


def test_cancel_marker_stops_one_member(tmp_path, base):
    dirs = folders(tmp_path, base, b={"max_steps": 400, "eval_every": 1000, "save_every": 1000})
    proc = subprocess.Popen([sys.executable, "-m", "lat_core.train.fused", "--attempt", "2", *map(str, dirs)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while proc.poll() is None and len(events_of(dirs[1], Step)) < 2:
        time.sleep(0.2)
    JobDir(dirs[1]).request_cancel(time.time())
    out = proc.communicate(timeout=HANG_S)[0].decode()
    assert proc.returncode == 1, out
    rc = {d.name: JobDir(d).attempt(2).read_exit().returncode for d in dirs}
    assert rc == {"a": 0, "b": -15, "c": 0}, out
    assert events_of(dirs[1], Step)[-1].step < 400 and not events_of(dirs[1], Finished)
    assert "cancelled: its cancel marker" in (dirs[1] / "train.log").read_text()
    assert events_of(dirs[0], Finished) and events_of(dirs[2], Finished)


def test_sigterm_to_the_group_cancels_every_member(tmp_path, base):
    dirs = folders(tmp_path, base, **{n: {"max_steps": 400, "eval_every": 1000, "save_every": 1000}
                                      for n in MEMBERS})
    proc = subprocess.Popen([sys.executable, "-m", "lat_core.train.fused", "--attempt", "1", *map(str, dirs)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while proc.poll() is None and len(events_of(dirs[0], Step)) < 2:
        time.sleep(0.2)
    proc.terminate()
    out = proc.communicate(timeout=HANG_S)[0].decode()
    assert proc.returncode == 1, out
    assert {d.name: JobDir(d).attempt(1).read_exit().returncode for d in dirs} == {n: -15 for n in MEMBERS}
    assert all("cancelled: SIGTERM to the group" in (d / "train.log").read_text() for d in dirs)
