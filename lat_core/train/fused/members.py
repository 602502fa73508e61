"""Stacked adapters in a shared base model, built from each job's own PEFT initialisation.

Why replay PEFT per job: PEFT decides which modules a LoraConfig adapts (target_modules, layers),
each one's rank and scaling (alpha / r, or alpha / sqrt(r) for rsLoRA) and the initial A (random,
from the global RNG) and B (zeros).  Wrapping the shared base with each job's config in turn, with
the RNG where that job's own process would have it, and unloading again, gives every member exactly
the adapter it would have had alone; the stacks copy those weights.

Each member's parameters are views of its true-rank slices of the stacks (nn.Parameter over the
slice shares its storage), in PEFT's order (per adapted module: A, then B), so a member's own
torch optimizer updates the stacks in place and its state_dict has the layout of a single job's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from lat_core.config.fuse import adapter_refusal, own_pieces_refusal
from lat_core.config.job import TrainConfigError
from lat_core.contract.jobdir.names import ADAPTER_WEIGHTS
from .flat import FlatStacks
from .stacked import LayoutSlot, StackedLoRALinear



@dataclass
class Replayed:
    """One job's adapter as PEFT built it: per adapted module (name without the PEFT prefix) its
    rank, scaling, dropout and initial A/B; and the LoraConfig (for adapter_config.json)."""
    layers: dict[str, dict]
    config: object


@dataclass
class Member:
    """A job's slice of the stacked model: its index, its parameters (views), its adapted modules."""
    index: int
    params: list[nn.Parameter]
    modules: list[tuple[str, StackedLoRALinear, int]] = field(default_factory=list)  # (name, layer, rank)
    config: object = None
    stacks: FlatStacks | None = None   # the group's flat weights and gradients (shared by all members)


def check_fusable(cfg) -> None:
    """Plain LoRA only (lat_core.config.fuse.adapter_refusal): DoRA changes the layer's math, PiSSA /
    LoRA-GA rewrite the base weights, SDLoRA trains base parameters; none can share one frozen base.
    Nor can a job's own data, TrainingArguments, callbacks or early stopping (own_pieces_refusal)."""
    why = adapter_refusal(cfg) or own_pieces_refusal(cfg)
    if why:
        raise TrainConfigError(why)


def check_adapter(base: nn.Module, cfg) -> None:
    """The job's adapter fits ``base`` (its target modules exist, none is refused), checked before
    any wrapping so that a member refused here leaves the shared base untouched."""
    from ..adapters import check_refusals
    from ..models import check_targets
    check_fusable(cfg)
    check_targets(base, cfg.peft.target_modules)
    check_refusals(base, cfg)


def replay_peft(base: nn.Module, cfg) -> Replayed:
    """Wrap ``base`` with the job's LoRA (drawing its init from the global RNG), read the adapter, unload."""
    from peft import get_peft_model

    from ..adapters import lora_config, lora_layers
    check_adapter(base, cfg)
    n_layers = int(getattr(base.config, "num_hidden_layers", 0) or 0)
    model = get_peft_model(base, lora_config(cfg, n_layers, {}))
    layers = {}
    for name, layer in lora_layers(model):
        drop = layer.lora_dropout["default"]
        layers[name] = {"r": layer.r["default"], "scaling": float(layer.scaling["default"]),
                        "dropout": float(getattr(drop, "p", 0.0)),
                        "A": layer.lora_A["default"].weight.detach().clone(),
                        "B": layer.lora_B["default"].weight.detach().clone()}
    config = model.peft_config["default"]
    model.unload()   # puts the original Linear modules back into base
    return Replayed(layers, config)


def install(base: nn.Module, replayed: list[Replayed]) -> tuple[LayoutSlot, list[Member]]:
    """Replace every module some job adapts by a StackedLoRALinear holding all jobs' adapters
    (rank 0 for a job that does not adapt it); returns the shared layout slot and the members."""
    slot = LayoutSlot()
    targets = {n for r in replayed for n in r.layers}
    modules = dict(base.named_modules())
    names = [n for n in modules if n in targets]   # module order, as PEFT lists parameters
    stacks = _flat_stacks(replayed, names, modules)
    members = [Member(j, [], config=r.config, stacks=stacks) for j, r in enumerate(replayed)]
    weights, grads = stacks.views(stacks.weights), stacks.views(stacks.grads)
    for k, name in enumerate(names):
        per_job = [r.layers.get(name) for r in replayed]
        layer = StackedLoRALinear(modules[name], [x["r"] if x else 0 for x in per_job],
                                  [x["scaling"] if x else 0.0 for x in per_job],
                                  [x["dropout"] if x else 0.0 for x in per_job], slot,
                                  weights[2 * k], weights[2 * k + 1])
        parent_name, _, child = name.rpartition(".")
        setattr(modules[parent_name] if parent_name else base, child, layer)
        layer.lora_A.grad = grads[2 * k]   # kept: the backward adds into them, members' grads are views
        layer.lora_Bt.grad = grads[2 * k + 1]
        with torch.no_grad():
            for j, x in enumerate(per_job):
                if x is None:
                    continue
                r = x["r"]
                layer.lora_A[j, :r].copy_(x["A"])
                layer.lora_Bt[j, :r].copy_(x["B"].t())
                members[j].modules.append((name, layer, r))
    for m in members:
        m.params = _member_params(m)
    return slot, members


def _flat_stacks(replayed: list[Replayed], names: list[str], modules: dict) -> FlatStacks:
    """The flat buffers for the stacks of the modules ``names`` (lora_A [R, in] then lora_Bt [R, out]
    each, R the largest rank any job gives the module), in the first adapter's dtype, on the base's
    device."""
    shapes = []
    for name in names:
        width = max(max(r.layers[name]["r"] if name in r.layers else 0 for r in replayed), 1)
        shapes += [(width, modules[name].in_features), (width, modules[name].out_features)]
    first = next(x for r in replayed for x in r.layers.values())
    return FlatStacks(shapes, len(replayed), first["A"].dtype, modules[names[0]].weight.device)


def _member_params(m: Member) -> list[nn.Parameter]:
    out = []
    for _, layer, r in m.modules:
        a = nn.Parameter(layer.lora_A.data[m.index, :r])
        b = nn.Parameter(layer.lora_Bt.data[m.index, :r].t())   # [out, r], dense
        a.grad = layer.lora_A.grad[m.index, :r]
        b.grad = layer.lora_Bt.grad[m.index, :r].t()
        out += [a, b]
    return out


def zero_member_grads(m: Member) -> None:
    """After the member's optimizer step: clear its slices of the stacks' gradients (in place, so
    the views stay linked)."""
    torch._foreach_zero_([p.grad for p in m.params])


def state_dict(m: Member) -> dict[str, torch.Tensor]:
    """The member's adapter under the keys PeftModel.save_pretrained writes."""
    out = {}
    for (name, _, _), a, b in zip(m.modules, m.params[0::2], m.params[1::2]):
        out[f"base_model.model.{name}.lora_A.weight"] = a.detach().contiguous().cpu()
        out[f"base_model.model.{name}.lora_B.weight"] = b.detach().contiguous().cpu()
    return out


def save_adapter(m: Member, path: Path) -> Path:
    """adapter_model.safetensors + adapter_config.json, loadable with PeftModel.from_pretrained."""
    from safetensors.torch import save_file
    path.mkdir(parents=True, exist_ok=True)
    save_file(state_dict(m), str(path / ADAPTER_WEIGHTS))
    m.config.save_pretrained(str(path))
    return path


def load_adapter(m: Member, path: Path) -> None:
    """Copy a saved adapter (a fused or a single job's) into the member's slices."""
    from safetensors.torch import load_file
    saved = load_file(str(path / ADAPTER_WEIGHTS))
    own = state_dict(m)
    if set(saved) != set(own):
        raise TrainConfigError(f"{path}: adapter keys differ from this job's adapter "
                               f"({len(set(saved) ^ set(own))} differ)")
    with torch.no_grad():
        for (name, _, _), a, b in zip(m.modules, m.params[0::2], m.params[1::2]):
            a.copy_(saved[f"base_model.model.{name}.lora_A.weight"])
            b.copy_(saved[f"base_model.model.{name}.lora_B.weight"])
