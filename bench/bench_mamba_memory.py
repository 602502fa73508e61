"""Peak memory of one Mamba LoRA training step on the CPU (transformers' slow path), to calibrate the
static prior's Mamba formula (lat_core/config/memory_prior.py).

    python bench/bench_mamba_memory.py                    # the default grid, one fresh process per point
    python bench/bench_mamba_memory.py --point 8,128,256,4,16,float32   # one point (rows,seq,hidden,layers,state,dtype)

Each point runs in its own process: a randomly initialised MambaForCausalLM (vocab 1000, expand 2), LoRA
r8 on in_proj/x_proj (peft), AdamW, random tokens filling every position; two steps (the second one's
optimizer state exists). What is printed is the growth of the process's peak RSS (``ru_maxrss``) over its
RSS just before the first step: the step's activations, gradients and optimizer state, not the libraries
or the weights. torch's CPU allocator returns freed blocks to malloc, so the peak RSS is the peak of live
tensors plus malloc's slack.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

GRID = [  # rows, seq, hidden, layers, state, dtype
    (4, 64, 128, 2, 16, "float32"),
    (8, 64, 128, 2, 16, "float32"),
    (8, 128, 128, 2, 16, "float32"),
    (8, 128, 256, 2, 16, "float32"),
    (8, 128, 128, 4, 16, "float32"),
    (8, 128, 128, 2, 8, "float32"),
    (8, 128, 256, 4, 16, "bfloat16"),
    (16, 128, 256, 4, 16, "bfloat16"),
]
VOCAB = 1000


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def one_point(rows: int, seq: int, hidden: int, layers: int, state: int, dtype: str) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = MambaConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, state_size=state,
                         expand=2, use_cache=False)
    model = MambaForCausalLM(config).to(getattr(torch, dtype))
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["in_proj", "x_proj"]))
    model.train()
    optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(0, VOCAB, (rows, seq))
    before = rss_bytes()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for _ in range(2):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"rows": rows, "seq": seq, "hidden": hidden, "layers": layers, "state": state, "dtype": dtype,
            "step_peak_mib": round((peak - max(before, 0)) / 2**20, 1),
            "maxrss_before_mib": round(maxrss_before / 2**20, 1)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--point", help="rows,seq,hidden,layers,state,dtype: measure this one point here")
    args = parser.parse_args(argv)
    if args.point:
        r, s, h, l, n, d = args.point.split(",")
        print(json.dumps(one_point(int(r), int(s), int(h), int(l), int(n), d)), flush=True)
        return
    for point in GRID:
        done = subprocess.run([sys.executable, __file__, "--point", ",".join(map(str, point))],
                              capture_output=True, text=True, check=True)
        print(done.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
