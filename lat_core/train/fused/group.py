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
from .. import data as D
from ..graphs import SpeedModes
from . import members as M
from .step import MemberRun, new_optimizer
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

    @property
    def layout(self):
        """How a pass's rows run (step.micro_step): graphed, packed, or None (eager, padded)."""
        return self.graphs or self.packed

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id


def check_same_base(cfgs, tokenizers) -> None:
    keys = {base_key(c) for c in cfgs}
    if len(keys) > 1:
        raise TrainConfigError(f"fuse: members differ in base model ({', '.join(c.name for c in cfgs)}: "
                               f"{sorted(map(str, keys))}); a group shares one base")
    vocab = tokenizers[0].get_vocab()
    for c, tok in zip(cfgs[1:], tokenizers[1:]):
        if tok.get_vocab() != vocab:
            raise TrainConfigError(f"fuse: {c.name}'s tokenizer differs from {cfgs[0].name}'s")


def _rng_positioner(cfgs, tokenizer, build_base):
    """f(j): puts the global RNG where member j's own process has it when it wraps its adapter:
    after manual_seed(seed) and the base build's draws.  A build that draws nothing (a pretrained
    load, a model initialised on the GPU) needs only the seed; else member j's build is replayed."""
    torch.manual_seed(cfgs[0].seed)
    seeded = torch.get_rng_state()
    base = build_base(cfgs[0], tokenizer)
    after = torch.get_rng_state()
    draws = not torch.equal(seeded, after)

    def position(j: int) -> None:
        if cfgs[j].seed == cfgs[0].seed:
            torch.set_rng_state(after)
        elif draws:
            build_base(cfgs[j], tokenizer)   # replays member j's draws; the weights are dropped
        else:
            torch.manual_seed(cfgs[j].seed)
    return base, position


def build_group(cfgs, device: torch.device, resume: list[bool] | None = None) -> Group:
    """The group, members in the order given; resume[j]: member j continues from its newest checkpoint."""
    from ..loop import _encode_all, check_dtype
    from ..models import build_base_model, load_tokenizer
    resume = resume or [False] * len(cfgs)
    datasets, tokenizers = [], []
    for c in cfgs:
        M.check_fusable(c)
        check_dtype(c, device)
        ds = D.load_dataset(c.data, c.data_dir)
        datasets.append(ds)
        tokenizers.append(load_tokenizer(c, D.build_tokenizer(ds)))
    check_same_base(cfgs, tokenizers)
    for c, d in zip(cfgs, datasets):
        if d.kind != "cls":   # generation: its loss and evaluation (generate) are not fused yet
            raise TrainConfigError(f"fuse: {c.name} trains on {c.data}, a generation task; only "
                                   "classification jobs fuse")
    tok = tokenizers[0]
    tok.padding_side = "left"
    base, position = _rng_positioner(cfgs, tok, build_base_model)
    base = base.to(device)
    if adapters_in_tf32(next(base.parameters()).dtype, device):
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    group = Group(base, LayoutSlot(), tok, device)
    replayed = []
    for j, (c, ds) in enumerate(zip(cfgs, datasets)):
        label_ids, splits, extra = _encode_all(ds, tok, c)
        c.train.max_steps, _ = resolve_max_steps(c, len(splits["train"]))
        D.check_fills_grad_accum(len(splits["train"]), c.train.grad_accum)
        group.data.append(MemberData(ds, splits, extra, label_ids))
        position(j)
        replayed.append(M.replay_peft(base, c))
    group.slot, members = M.install(base, replayed)
    base.train()
    from ..graphs import set_optimizer_mode
    from ..hf_trainer import build_scheduler
    from .graphed import FusedGraphs, graphs_decision
    graphed, graphs_why = graphs_decision(cfgs, device)
    for c, m, d, again in zip(cfgs, members, group.data, resume):
        opt = new_optimizer(c, m, graphed)
        start = 0
        if again:
            d.resumed = restore(c, m, opt)
            start = d.resumed["step"]
        run = MemberRun(c, m, d.splits["train"], d.label_ids, opt, build_scheduler(opt, c, c.train.max_steps, start))
        set_optimizer_mode(opt, graphed, device)   # after a restore, which may come from the other mode
        run.start(start)
        group.runs.append(run)
    if graphed:
        group.graphs = FusedGraphs(group)
    from .packed import PackedPass, packing_decision
    packs, pack_why = packing_decision(cfgs, device, graphed)
    group.modes = SpeedModes(graphed, graphs_why, packs, pack_why)
    if packs:
        group.packed = PackedPass(base, group.slot, device)
    return group


def restore(cfg, member: M.Member, optimizer) -> dict:
    """Adapter and optimizer state of the member's newest checkpoint (a fused or a single job's);
    returns its lat_state.json with ``optimizer_restored``.  The global RNG is not restored: the
    group shares it, and fused members train without dropout's draws mattering (dropout 0)."""
    import json

    from ..checkpoints import checkpoints, load_tensors
    step, path = checkpoints(cfg.output_dir)[-1]
    M.load_adapter(member, path)
    restored = (path / "optimizer.pt").is_file()
    if restored:
        optimizer.load_state_dict(load_tensors(path / "optimizer.pt"))
    return {**json.loads((path / "lat_state.json").read_text()), "step": step, "optimizer_restored": restored}
