"""Per-member training state in a fused group (lat_core/train/fused/step.py, group.py): members with
different seeds, ranks, learning rates, schedules, batch sizes, accumulation and lengths train
together and each gets the loss curve it gets trained alone by the single-job trainer."""
from pathlib import Path

import pytest
import torch

from lat_core.config.job import TrainConfigError
from lat_core.train.fused.group import build_group
from lat_core.train.fused.step import folds, micro_step, take_pass
from tests.helpers.fused import job_cfg, run_alone, saved_tiny_base

MEMBERS = [
    ("a", {"r": 4, "alpha": 8}, {"batch_size": 8, "lr": 2e-3}, 3),
    ("b", {"r": 8, "alpha": 16, "use_rslora": True},
     {"batch_size": 4, "grad_accum": 2, "lr": 5e-3, "lr_scheduler": "cosine", "warmup_steps": 2,
      "weight_decay": 0.01}, 5),
    ("c", {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]},
     {"batch_size": 6, "lr": 1e-3, "lr_scheduler": "linear", "max_steps": 4}, 7),
]


def member_cfgs(root, base, **train):
    return [_with_base(job_cfg(root, name, peft=dict(p), train={**t, **train}, seed=seed), base)
            for name, p, t, seed in MEMBERS]


def _with_base(cfg, base):
    cfg.model.name_or_path = str(base)
    return cfg


def train_fused(group, layout=None) -> list[dict[int, float]]:
    """Each member's loss at each step; layout: a fused.graphed.FusedGraphs (the static step) or the
    group's packed.PackedPass; None: eager, left-padded rows."""
    curves = [{} for _ in group.runs]
    while not all(r.done for r in group.runs):
        stepped, broken = micro_step(group.base, group.slot, group.runs, group.pad_id, group.device, layout)
        assert not broken
        for r in stepped:
            curves[group.runs.index(r)][r.step] = float(r.step_loss)
            r.step_loss = None
    return curves


# tiny-sst2's rows are 12-14 tokens: at max_seq_len 48 b's two micro-batches fold into one pass, at
# 16 they do not (the folded pass would exceed the group's largest unfolded one)
# packed: the pass as one row without padding (fused.packed, on by default on the CPU)
@pytest.mark.parametrize("max_seq_len,b_micro,packed", [(48, 2, False), (16, 1, False), (48, 2, True), (16, 1, True)])
def test_each_member_trains_as_it_does_alone(tmp_path, max_seq_len, b_micro, packed):
    base = saved_tiny_base(tmp_path / "base")
    group = build_group(member_cfgs(tmp_path / "fused", base, max_seq_len=max_seq_len), torch.device("cpu"))
    assert group.packed is not None and group.layout is group.packed
    windows = [r.open_window() for r in group.runs]   # what the first pass takes from (nothing taken yet)
    assert [len(w) for w in windows] == [1, 2, 1] and folds(group.runs, windows) == (b_micro == 2)
    fused = train_fused(group, group.packed if packed else None)
    assert [len(c) for c in fused] == [6, 6, 4]
    assert len({round(c[1], 6) for c in fused}) == 3 and all(c[1] != c[4] for c in fused)
    for cfg, curve in zip(member_cfgs(tmp_path / "alone", base, max_seq_len=max_seq_len), fused):
        alone = run_alone(cfg)
        assert sorted(alone) == sorted(curve)
        for step, loss in alone.items():
            assert curve[step] == pytest.approx(loss, rel=1e-5), (cfg.name, step)


def test_a_folded_pass_brings_each_members_whole_step(tmp_path):
    group = build_group(member_cfgs(tmp_path / "f", saved_tiny_base(tmp_path / "base")), torch.device("cpu"))
    p = take_pass(group.runs)
    assert p.micro == [1, 2, 1] and [len(ex) for _, ex, _ in p.parts] == [8, 8, 6]
    assert all(r.closes_step() for r in group.runs)   # b's accumulation window is empty: it steps now


def mamba_cfgs(root):
    """Two tiny Mamba jobs (transformers' slow path; LoRA on in_proj/x_proj), ranks, batch sizes and
    accumulation different: b's two micro-batches fold into one pass."""
    import yaml

    from lat_core.config.job import parse_config
    src = Path(__file__).resolve().parents[3] / "configs/experiments/mamba/tiny_lora.yaml"
    out = []
    for name, r, batch, accum in (("a", 4, 8, 1), ("b", 8, 4, 2)):
        raw = yaml.safe_load(src.read_text())
        raw.update(name=name, seed=1, output_dir=str(root / name))
        raw["peft"].update(r=r, alpha=2 * r)
        raw["train"].update(max_steps=4, batch_size=batch, grad_accum=accum, eval_every=100, save_every=100,
                            log_every=1)
        out.append(parse_config(raw, environ={}))
    return out


def test_mamba_members_train_as_they_do_alone(tmp_path):
    group = build_group(mamba_cfgs(tmp_path / "fused"), torch.device("cpu"))
    assert group.layout is None and group.modes.pack_why == "a: mamba has no varlen path here"   # eager, padded
    assert folds(group.runs, [r.open_window() for r in group.runs])
    fused = train_fused(group)
    for cfg, curve in zip(mamba_cfgs(tmp_path / "alone"), fused):
        alone = run_alone(cfg)
        assert sorted(alone) == sorted(curve) == [1, 2, 3, 4]
        for step, loss in alone.items():
            assert curve[step] == pytest.approx(loss, rel=1e-5), (cfg.name, step)


def test_a_member_on_another_base_is_left_out_with_its_reason(tmp_path):
    cfgs = [job_cfg(tmp_path, "x", seed=1), job_cfg(tmp_path, "y", seed=2)]   # tiny-random: seed = weights
    group = build_group(cfgs, torch.device("cpu"))
    assert group.members_of == [0] and len(group.runs) == 1 and list(group.failed) == [1]
    assert "fuse: y's base model" in str(group.failed[1]) and "differs from x's" in str(group.failed[1])


def test_only_plain_lora_fuses(tmp_path):
    with pytest.raises(TrainConfigError, match="only plain LoRA"):
        build_group([job_cfg(tmp_path, "d", peft={"method": "dora"})], torch.device("cpu"))


@pytest.mark.parametrize("saved_base", [False, True])
def test_members_start_from_the_adapter_their_own_process_draws(tmp_path, saved_base):
    """tiny-random (the build draws from the RNG; members share the seed) and a saved base (members'
    seeds differ): each member's initial A equals the one loop.run's wrap_peft draws."""
    from peft import get_peft_model_state_dict

    from lat_core.train import data as D
    from lat_core.train.fused import members as M
    from lat_core.train.models import build_base_model, load_tokenizer, wrap_peft
    cfgs = [job_cfg(tmp_path, n, peft={"r": r}, seed=s) for n, r, s in
            (("p", 4, 3), ("q", 8, 3 if not saved_base else 9))]
    if saved_base:
        cfgs = [_with_base(c, saved_tiny_base(tmp_path / "base")) for c in cfgs]
    group = build_group(cfgs, torch.device("cpu"))
    for c, run in zip(cfgs, group.runs):
        torch.manual_seed(c.seed)   # what loop.run does before it builds the base and wraps it
        ds = D.load_dataset(c.data)
        alone = wrap_peft(build_base_model(c, load_tokenizer(c, D.build_tokenizer(ds))), c, environ={})
        theirs = get_peft_model_state_dict(alone)
        assert all(torch.equal(v, theirs[k]) for k, v in M.state_dict(run.member).items())


def test_with_the_switch_off_each_member_steps_an_adamw_of_its_own_to_the_same_curve(tmp_path, monkeypatch):
    """LAT_FUSED_ONE_ADAMW=0: each member's own torch AdamW over its views of the stacks (the
    group's one AdamW, fused/group_adamw.py, is the default) trains the same curves."""
    from lat_core.train.fused.group_adamw import SlicedAdamW
    base = saved_tiny_base(tmp_path / "base")
    group = build_group(member_cfgs(tmp_path / "one", base), torch.device("cpu"))
    assert all(isinstance(r.optimizer, SlicedAdamW) for r in group.runs)
    assert group.optimizer_line == "optimizer: one AdamW step for the group's 3 members"
    together = train_fused(group)
    monkeypatch.setenv("LAT_FUSED_ONE_ADAMW", "0")
    group = build_group(member_cfgs(tmp_path / "own", base), torch.device("cpu"))
    assert all(type(r.optimizer) is torch.optim.AdamW for r in group.runs)
    assert "LAT_FUSED_ONE_ADAMW=0" in group.optimizer_line
    for mine, theirs in zip(train_fused(group), together):
        assert sorted(mine) == sorted(theirs)
        for step, loss in theirs.items():
            assert mine[step] == pytest.approx(loss, rel=1e-6), step
