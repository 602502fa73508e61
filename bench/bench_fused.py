"""One fused group step against the same jobs stepped one by one (issue 17, stage 2).

    python bench/bench_fused.py [--device cpu|cuda] [--jobs 8] [--rows 8] [--seq 16] [--steps 5]
                                [--hidden 64 --layers 2 --heads 2] [--dtype float32] [--ranks 4,8,16,32]
                                [--family mamba --state-size 16]

Both sides in one call, on one random-weight GLA base of the given sizes (the GLA-1.3B architecture
is ``--hidden 2048 --layers 24 --heads 4``) and random tokens, LoRA on q/k/v/o with the ranks cycled
over the jobs, each job ``--rows`` rows of ``--seq`` tokens per optimizer step. ``--family mamba``:
a random-weight Mamba base instead (the Mamba-130m architecture is ``--hidden 768 --layers 24
--state-size 16 --vocab 50280``), LoRA on in_proj/x_proj; its sides are separate and fused only
(packing and graphs are GLA's):

- separate: each job its own PEFT model and AdamW, stepped one after another in this process (the
  work K single-job processes do, without their process overheads);
- fused: one base with stacked adapters (lat_core/train/fused), one forward/backward per step over
  all jobs' rows, each job's own AdamW (step.micro_step, the group runner's code).

- fused-packed: the fused step with every job's rows packed into one row without padding
  (fused/packed.py, fla's varlen path; a group's default on the CPU);
- fused-graphs (CUDA only): the fused step replayed from CUDA graphs (fused/graphed.py), each job's
  optimizer step a captured graph too.
- fused-graphs-fla-recurrent (``--fla-recurrent``): the same with fla's own kernel for short rows
  (its recurrent decoding kernel; fla_gla.train_short_rows_in_chunks routes training to chunk_gla).
- fused-member-adamw, fused-graphs-member-adamw (only when ``--sides`` names them): fused and
  fused-graphs with each member its own AdamW (as LAT_FUSED_ONE_ADAMW=0 runs a group) instead of
  the group's one AdamW step (fused/group_adamw.py, the default); e.g. on a GPU
  ``--sides fused-graphs,fused-graphs-member-adamw``.

``--ragged``: each example between half of ``--seq`` and ``--seq`` tokens (short sentences vary;
padding is what packing saves), else every example fills ``--seq``.

Prints ms per optimizer step of all jobs, trained tokens/s and the ratios to the first side.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from types import SimpleNamespace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--ragged", action="store_true", help="example lengths from seq/2 to seq, not all seq")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--family", choices=("gla", "mamba"), default="gla")
    p.add_argument("--state-size", type=int, default=16, help="Mamba's SSM state size (--family mamba)")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--ranks", default="4,8,16,32")
    p.add_argument("--sides", default="", help="comma-separated subset of the sides (default: all)")
    p.add_argument("--fla-recurrent", action="store_true",
                   help="also time fused-graphs with fla's own kernel for rows of 64 tokens or fewer (fused_recurrent_gla)")
    p.add_argument("--profile", action="store_true",
                   help="after timing: where the GPU's time goes in two steps of the graphed fused side (the "
                        "eager one without a GPU graph side; torch.profiler, kernels by self device time) and "
                        "the GPU's busy time per step against the step's wall time")
    return p.parse_args(argv)


def job_cfgs(a):
    from lat_core.config.job import parse_config
    ranks = [int(r) for r in a.ranks.split(",")]
    out = []
    for k in range(a.jobs):
        r = ranks[k % len(ranks)]
        raw = {"name": f"job{k}", "model": {"family": a.family, "name_or_path": "tiny-random", "dtype": a.dtype,
                                            "tiny": tiny_sizes(a)},
               "peft": {"r": r, "alpha": 2 * r, **TARGETS[a.family]}, "data": "tiny-sst2", "seed": 1,
               "train": {"batch_size": a.rows, "lr": 2e-4, "max_steps": 10_000, "max_seq_len": a.seq},
               "output_dir": "/tmp/bench_fused_unused"}
        out.append(parse_config(raw, environ={}))
    return out


TARGETS = {"gla": {}, "mamba": {"target_modules": ["in_proj", "x_proj"]}}   # GLA: the default q/k/v/o


def tiny_sizes(a) -> dict:
    sizes = {"hidden_size": a.hidden, "num_hidden_layers": a.layers, "vocab_size": a.vocab}
    return {**sizes, **({"num_heads": a.heads} if a.family == "gla" else {"state_size": a.state_size})}


def examples(a, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, a.vocab, (4 * a.rows, a.seq), generator=g).tolist()
    lengths = torch.randint(a.seq // 2, a.seq + 1, (len(ids),), generator=g).tolist() if a.ragged else [a.seq] * len(ids)
    return [{"input_ids": row[:n], "label": i % 2} for i, (row, n) in enumerate(zip(ids, lengths))]


def with_fla_recurrent(step):
    """step with fla's GLA layer back on its own kernel choice: rows of 64 tokens or fewer through
    fused_recurrent_gla (fla_gla.train_short_rows_in_chunks routes training to chunk_gla).  A captured
    graph keeps the kernels it was captured with, so the swap matters while a side warms up and captures."""
    import fla.layers.gla as layer

    def run():
        router = layer.fused_recurrent_gla
        layer.fused_recurrent_gla = getattr(router, "fla_recurrent", router)
        try:
            return step()
        finally:
            layer.fused_recurrent_gla = router
    return run


def timed(fn, a, sync) -> float:
    for _ in range(a.warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        fn()
    sync()
    return (time.perf_counter() - t0) / a.steps


def print_profile(name, step, sync, steps: int = 2) -> None:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall = (time.perf_counter() - t0) / steps
    table = prof.key_averages()
    busy = sum(e.self_device_time_total for e in table) / 1e3 / steps   # us -> ms
    print(f"profile of {name}: GPU kernels {busy:.1f} ms per step, wall {wall * 1e3:.1f} ms per step (profiled)")
    print(table.table(sort_by="self_device_time_total", row_limit=30, max_name_column_width=70))


def main(argv=None) -> int:
    a = parse_args(argv)
    import torch
    import torch.nn.functional as F

    from lat_core.train.fused import members as M
    from lat_core.train.fused.graphed import FusedGraphs
    from lat_core.train.fused.packed import PackedPass
    from lat_core.train.fused.step import MemberRun, micro_step, new_group_optimizer, new_optimizer, start_optimizer
    from lat_core.train.hf_trainer import build_scheduler
    from lat_core.train.models import _tiny_model, wrap_peft
    from lat_core.train import data as D

    device = torch.device(a.device)
    from lat_core.train.fused.stacked import adapters_in_tf32
    if adapters_in_tf32(getattr(torch, a.dtype), device):   # as build_group sets it for a group
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    if device.type == "cpu":
        torch.set_num_threads(1)   # as a CPU job runs (train.num_threads defaults to 1)
    if device.type == "cuda" and a.family == "gla":
        from lat_core.train.fla_gla import use_gla_kernels_for
        use_gla_kernels_for(True)   # as a job on a GPU: short rows in chunks, the GPU model's kernel tunings
    cfgs = job_cfgs(a)
    tok = type("Tok", (), {"pad_token_id": 0, "eos_token_id": 1, "__len__": lambda self: a.vocab})()
    torch.manual_seed(0)
    base = _tiny_model(cfgs[0], tok).to(device)
    label_ids = [3, 4]
    data = [examples(a, k) for k in range(a.jobs)]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    wanted = a.sides.split(",") if a.sides else None
    separate = [wrap_peft(copy.deepcopy(base), c, environ={}) for c in cfgs] if not wanted or "separate" in wanted else []
    opts = [torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=2e-4) for m in separate]
    batches = [{k: v.to(device) for k, v in D.collate(d[:a.rows], 0).items()} for d in data]   # left-padded
    targets = torch.tensor(label_ids, device=device)

    def separate_step():
        for model, opt, batch in zip(separate, opts, batches):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           logits_to_keep=2).logits
            F.cross_entropy(logits[:, -2].float(), targets[batch["labels"]]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    gla = a.family == "gla"   # packing (fla's varlen path) and graphs are GLA's
    graphed_base = copy.deepcopy(base) if gla and device.type == "cuda" else None   # copies before fused's install
    packed_base = copy.deepcopy(base) if gla and (not wanted or "fused-packed" in wanted) else None
    recurrent_base = copy.deepcopy(base) if gla and device.type == "cuda" and a.fla_recurrent else None
    member_adamw = [name for name in ("fused-member-adamw", "fused-graphs-member-adamw")
                    if wanted and name in wanted and ("graphs" not in name or graphed_base is not None)]
    member_adamw_bases = {name: copy.deepcopy(base) for name in member_adamw}

    def fused_group(model, graphed: bool, packed: bool = False, one_adamw: bool = True):
        slot, members = M.install(model, [M.replay_peft(model, c) for c in cfgs])
        group_adamw = new_group_optimizer(members, graphed)[0] if one_adamw else None
        runs = []
        for c, m, d in zip(cfgs, members, data):
            opt = new_optimizer(c, m, graphed, group_adamw)
            run = MemberRun(c, m, d, label_ids, opt, build_scheduler(opt, c, c.train.max_steps, 0))
            start_optimizer(opt, graphed, device)
            run.start(0)
            runs.append(run)
        group = SimpleNamespace(base=model, slot=slot, runs=runs, device=device, pad_id=0)
        layout = FusedGraphs(group) if graphed else PackedPass(model, slot, device) if packed else None
        return lambda: micro_step(model, slot, runs, 0, device, layout)

    sides = {"separate": separate_step, "fused": fused_group(base, False)}
    if packed_base is not None:
        sides["fused-packed"] = fused_group(packed_base, False, packed=True)
    if graphed_base is not None:   # CUDA graphs of the fused step (fused/graphed.py)
        sides["fused-graphs"] = fused_group(graphed_base, True)
        if a.fla_recurrent:   # the same, with fla's own kernel choice for short rows (the baseline)
            sides["fused-graphs-fla-recurrent"] = with_fla_recurrent(fused_group(recurrent_base, True))
    for name, model in member_adamw_bases.items():   # each member its own AdamW
        sides[name] = fused_group(model, "graphs" in name, one_adamw=False)
    if wanted:
        sides = {name: step for name, step in sides.items() if name in wanted}
    # two rounds, sides alternating, best of each: the first calls of a side pay one-off costs
    # (TorchScript profiling runs of the CPU GLA path, the allocator, autotuning) the other then skips
    best = dict.fromkeys(sides, float("inf"))
    for round_ in range(2):
        for name, step in sides.items():
            t = timed(step, a, sync)
            best[name] = min(best[name], t)
            # as measured, so a call cut short by its time limit still reports what it timed
            print(f"round {round_ + 1}: {name} {t * 1e3:.1f} ms per step", file=sys.stderr, flush=True)
    tokens = a.jobs * a.rows * sum(len(e["input_ids"]) for d in data for e in d) / sum(map(len, data))
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
          f"{a.jobs} jobs x {a.rows} rows x {a.seq} tokens, {a.family} hidden {a.hidden} x {a.layers} layers, "
          f"{a.dtype}, ranks {a.ranks}{', ragged lengths' if a.ragged else ''}, best of 2 rounds of {a.steps} steps "
          f"after {a.warmup}")
    print("| side | ms per step (all jobs) | trained tokens/s |\n| --- | --- | --- |")
    for name, t in best.items():
        print(f"| {name} | {t * 1e3:.1f} | {tokens / t:,.0f} |")
    first = next(iter(best))
    for name in list(best)[1:]:
        print(f"{name} / {first} speed: {best[first] / best[name]:.2f}x")
    if a.profile and device.type == "cuda":
        name = "fused-graphs" if "fused-graphs" in sides else "fused"
        print_profile(name, sides[name], sync)
    return 0


if __name__ == "__main__":
    sys.exit(main())
