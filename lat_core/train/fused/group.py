"""A fused group from its members' job configs: one tokenizer, one frozen base, each member's data,
adapter (as its own process would have initialised it), optimizer and schedule.

Why members must share more than the model name: the base weights of a tiny-random model depend on
the job's seed (models.build_base_model seeds before building), and the tokenizer sets the
vocabulary; BASE_FIELDS and the tokenizer check make "same base" mean the same weights.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lat_core.config.fuse import base_key
from lat_core.config.job import TrainConfigError, resolve_max_steps
from lat_core.contract.jobdir.names import LAT_STATE, OPTIMIZER_STATE
from .. import data as D
from ..graphs import SpeedModes
from . import members as M
from .step import MemberRun, new_group_optimizer, new_optimizer, start_optimizer
from .stacked import LayoutSlot, adapters_in_tf32


@dataclass
class MemberData:
    """What evaluation needs besides the model: dataset, encoded splits, label token ids."""
    ds: object
    splits: dict
    extra_tests: dict
    label_ids: list[int]
    resumed: dict | None = None      # lat_state.json of the checkpoint resumed from (None: fresh)


@dataclass
class Group:
    base: torch.nn.Module
    slot: LayoutSlot
    tokenizer: object
    device: torch.device
    runs: list[MemberRun] = field(default_factory=list)
    data: list[MemberData] = field(default_factory=list)
    modes: SpeedModes | None = None  # graphs and packing on or off, and why (graphs_decision, packing_decision)
    graphs: object = None            # graphed.FusedGraphs when the step replays CUDA graphs
    packed: object = None            # packed.PackedPass when the pass is one row without padding
    members_of: list[int] = field(default_factory=list)   # each run's index among the configs given
    optimizer_line: str = ""         # one AdamW for the group or one per member, and why (step.new_group_optimizer)
    failed: dict[int, BaseException] = field(default_factory=dict)   # config index -> why it cannot start

    @property
    def layout(self):
        """How a pass's rows run (step.micro_step): graphed, packed, or None (eager, padded)."""
        return self.graphs or self.packed

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id


class NoMemberStarts(TrainConfigError):
    """No member of the group could start; ``failed``: member index -> its own reason."""

    def __init__(self, cfgs, failed: dict[int, BaseException]):
        super().__init__("no member of the fused group could start: " + "; ".join(
            f"{cfgs[i].name}: {exc}" for i, exc in sorted(failed.items())))
        self.failed = failed


def per_member(indices: list[int], failed: dict[int, BaseException], make) -> dict[int, object]:
    """{i: make(i)} for the members among ``indices`` (in order) for which make returns; one whose
    make raises is left out with its reason in ``failed``: what a member brings (its config, data,
    folder, adapter) is its own, and one member's fault never stops the others."""
    made = {}
    for i in indices:
        try:
            made[i] = make(i)
        except Exception as exc:  # noqa: BLE001 - the member's own reason, reported as its failure
            failed[i] = exc
    return made


def check_shares_base(cfgs, tokenizers, first: int, i: int) -> None:
    """Member i shares member ``first``'s base: same base key (same weights) and vocabulary."""
    if base_key(cfgs[i]) != base_key(cfgs[first]):
        raise TrainConfigError(f"fuse: {cfgs[i].name}'s base model ({base_key(cfgs[i])}) differs from "
                               f"{cfgs[first].name}'s ({base_key(cfgs[first])}); a group shares one base")
    if tokenizers[i].get_vocab() != tokenizers[first].get_vocab():
        raise TrainConfigError(f"fuse: {cfgs[i].name}'s tokenizer differs from {cfgs[first].name}'s")


def _rng_positioner(cfgs, tokenizer, build_base):
    """(base, f(cfg)): f puts the global RNG where that member's own process has it when it wraps
    its adapter: after manual_seed(seed) and the base build's draws.  A build that draws nothing (a
    pretrained load, a model initialised on the GPU) needs only the seed; else the member's build is
    replayed."""
    torch.manual_seed(cfgs[0].seed)
    seeded = torch.get_rng_state()
    base = build_base(cfgs[0], tokenizer)
    after = torch.get_rng_state()
    draws = not torch.equal(seeded, after)

    def position(cfg) -> None:
        if cfg.seed == cfgs[0].seed:
            torch.set_rng_state(after)
        elif draws:
            build_base(cfg, tokenizer)   # replays the member's draws; the weights are dropped
        else:
            torch.manual_seed(cfg.seed)
    return base, position


def build_group(cfgs, device: torch.device, resume: list[bool] | None = None, setup=None) -> Group:
    """The group, members in the order given; resume[i]: member i continues from its newest checkpoint.

    A member whose own config, data, tokenizer, adapter or checkpoint cannot start is left out with
    its reason in ``group.failed`` (by its index in cfgs) and the others start; NoMemberStarts when
    none can.  Its data is checked before the base is built, so a member refused there never
    shapes the group.  ``setup`` (a SetupPhases): laps data, model and adapter."""
    from ..models import build_base_model
    resume = resume or [False] * len(cfgs)
    failed: dict[int, BaseException] = {}
    loaded = _starting(cfgs, failed, per_member(list(range(len(cfgs))), failed,
                                                lambda i: _load_member(cfgs[i], device)))
    first, *others = loaded
    tokenizers = {i: tok for i, (_, tok) in loaded.items()}
    sharing = [first, *per_member(others, failed, lambda i: check_shares_base(cfgs, tokenizers, first, i))]
    tok = tokenizers[first]
    tok.padding_side = "left"
    data = _starting(cfgs, failed, per_member(sharing, failed,
                                              lambda i: _encode_member(cfgs[i], loaded[i][0], tok)))
    _lap(setup, "data")
    base, position = _rng_positioner([cfgs[i] for i in data], tok, build_base_model)
    base = base.to(device)
    _lap(setup, "model")
    alive = list(_starting(cfgs, failed, per_member(list(data), failed, lambda i: M.check_adapter(base, cfgs[i]))))
    if adapters_in_tf32(next(base.parameters()).dtype, device):
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    group = Group(base, LayoutSlot(), tok, device, data=[data[i] for i in alive], members_of=alive, failed=failed)
    replayed = []
    for i in alive:
        position(cfgs[i])
        replayed.append(M.replay_peft(base, cfgs[i]))
    group.slot, members = M.install(base, replayed)
    base.train()
    _start_runs(group, [cfgs[i] for i in alive], members, [resume[i] for i in alive])
    _starting(cfgs, failed, [i for i in alive if i not in failed])
    _lap(setup, "adapter")
    return group


def _lap(setup, name: str) -> None:
    if setup is not None:
        setup.lap(name)


def _starting(cfgs, failed: dict[int, BaseException], alive):
    """``alive`` (the members still starting), or NoMemberStarts when none is."""
    if not alive:
        raise NoMemberStarts(cfgs, failed)
    return alive


def _load_member(cfg, device: torch.device) -> tuple:
    """(dataset, tokenizer) of a member whose adapter and dtype can fuse; its data a classification task."""
    from ..loop import check_dtype
    from ..models import load_tokenizer
    M.check_fusable(cfg)
    check_dtype(cfg, device)
    ds = D.load_dataset(cfg.data, cfg.data_dir)
    if ds.kind != "cls":   # generation: its loss and evaluation (generate) are not fused yet
        raise TrainConfigError(f"fuse: {cfg.name} trains on {cfg.data_name}, a generation task; only "
                               "classification jobs fuse")
    return ds, load_tokenizer(cfg, D.build_tokenizer(ds))


def _encode_member(cfg, ds, tok) -> MemberData:
    """The member's encoded splits with the group's tokenizer; its max_steps resolved and its data
    checked to fill its gradient accumulation, as a job alone checks before it trains."""
    from ..loop import _encode_all
    label_ids, splits, extra = _encode_all(ds, tok, cfg)
    cfg.train.max_steps, _ = resolve_max_steps(cfg, len(splits["train"]))
    D.check_fills_grad_accum(len(splits["train"]), cfg.train.grad_accum)
    return MemberData(ds, splits, extra, label_ids)


def _start_runs(group: Group, cfgs, members, resume: list[bool]) -> None:
    """Each member's optimizer, schedule and sampler (from its checkpoint where it resumes), and the
    group's speed modes.  A member whose optimizer cannot be made or whose checkpoint cannot be
    restored stays in the stacks, its run done before it starts, with its reason in group.failed."""
    from ..hf_trainer import build_scheduler
    from .graphed import FusedGraphs, graphs_decision
    from .packed import PackedPass, packing_decision
    graphed, graphs_why = graphs_decision(cfgs, group.device)
    one_adamw, group.optimizer_line = new_group_optimizer(members, graphed)
    for i, c, m, d, again in zip(group.members_of, cfgs, members, group.data, resume):
        run = MemberRun(c, m, d.splits["train"], d.label_ids, None, None)
        group.runs.append(run)
        try:
            run.optimizer = new_optimizer(c, m, graphed, one_adamw)
            start = 0
            if again:
                d.resumed = restore(c, m, run.optimizer)
                start = d.resumed["step"]
            run.scheduler = build_scheduler(run.optimizer, c, c.train.max_steps, start)
            start_optimizer(run.optimizer, graphed, group.device)
            run.start(start)
        except Exception as exc:  # noqa: BLE001 - its optimizer or checkpoint: its own failure
            group.failed[i] = exc
            run.done = True
    if graphed:
        group.graphs = FusedGraphs(group)
    packs, pack_why = packing_decision(cfgs, group.device, graphed)
    group.modes = SpeedModes(graphed, graphs_why, packs, pack_why)
    if packs:
        group.packed = PackedPass(group.base, group.slot, group.device)


def restore(cfg, member: M.Member, optimizer) -> dict:
    """Adapter and optimizer state of the member's newest checkpoint (a fused or a single job's);
    returns its lat_state.json with ``optimizer_restored``.  The global RNG is not restored: the
    group shares it, and fused members train without dropout's draws mattering (dropout 0)."""
    import json

    from ..checkpoints import checkpoints, load_tensors
    step, path = checkpoints(cfg.output_dir)[-1]
    M.load_adapter(member, path)
    restored = (path / OPTIMIZER_STATE).is_file()
    if restored:
        optimizer.load_state_dict(load_tensors(path / OPTIMIZER_STATE))
    return {**json.loads((path / LAT_STATE).read_text()), "step": step, "optimizer_restored": restored}
