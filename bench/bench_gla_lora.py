"""GLA-1.3B architecture (random weights) + LoRA r8 on QKVO in bf16: tokens/s and peak memory.

    python bench/bench_gla_lora.py [--steps 20] [--json OUT]

Compares, in one process and on one GPU, the seeds' setting (batch 4, seq 256, gradient
checkpointing on) with the same hyperparameters and checkpointing off, then batch 64, and reports
the batch-64 throughput as a fraction of the bf16 matmul peak measured in the same call. Model FLOPs
per token are counted as 4 x parameters (forward + activation gradients; frozen weights get no weight
gradients) plus 2 x parameters more when checkpointing recomputes the forward.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def matmul_peak_tflops(n: int = 8192, reps: int = 10) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e12


def build(checkpointing: bool, linear_ce: bool = False):
    from fla.models import GLAConfig, GLAForCausalLM
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    # defaults = the 1.3B shape; linear_ce: fla's fused linear + cross entropy (no full logits tensor)
    config = GLAConfig(vocab_size=32000, fuse_cross_entropy=not linear_ce, fuse_linear_cross_entropy=linear_ce,
                       use_cache=False)
    model = GLAForCausalLM(config).to(device="cuda", dtype=torch.bfloat16)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = get_peft_model(model, lora)
    params = sum(p.numel() for p in model.parameters())
    return model, params


def run(checkpointing: bool, batch: int, seq: int, steps: int, linear_ce: bool = False) -> dict:
    model, params = build(checkpointing, linear_ce)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    tokens = torch.randint(0, 32000, (batch, seq), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    losses = []
    first = time.perf_counter()
    for step in range(steps + 3):
        if step == 1:
            torch.cuda.synchronize()
            print(f"  first step (Triton compile + autotune included): {time.perf_counter() - first:.1f} s", flush=True)
        if step == 3:
            torch.cuda.synchronize()
            start = time.perf_counter()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tok_s = batch * seq * steps / seconds
    flops_per_token = (6 if checkpointing else 4) * params
    result = {"checkpointing": checkpointing, "linear_ce": linear_ce, "batch": batch, "seq": seq, "steps": steps,
              "tokens_per_s": round(tok_s), "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
              "params_m": round(params / 1e6, 1), "tflops": round(tok_s * flops_per_token / 1e12, 1),
              "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4)}
    del model, opt
    torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--no-batch64", action="store_true", help="skip the batch-64 run (new shapes: autotunes again)")
    parser.add_argument("--batch64-only", action="store_true", help="only the batch-64 runs")
    parser.add_argument("--linear-ce", action="store_true",
                        help="also run batch 64 with fla's fused linear cross entropy (the logits never materialise)")
    args = parser.parse_args()
    peak = matmul_peak_tflops()
    print(f"bf16 matmul peak {peak:.0f} TFLOP/s", flush=True)
    rows = []
    big = max(5, args.steps // 2)
    plan = [] if args.batch64_only else [(True, 4, args.steps, False), (False, 4, args.steps, False)]
    plan += [] if args.no_batch64 else [(False, 64, big, False)] + ([(False, 64, big, True)] if args.linear_ce else [])
    for ckpt, batch, steps, linear_ce in plan:
        rows.append(run(ckpt, batch, 256, steps, linear_ce))
        print(json.dumps(rows[-1]), flush=True)
    summary = {"device": torch.cuda.get_device_name(), "bf16_matmul_peak_tflops": round(peak, 1), "runs": rows}
    small = [r for r in rows if r["batch"] == 4]
    if len(small) == 2:
        summary["ckpt_off_speedup"] = round(small[1]["tokens_per_s"] / small[0]["tokens_per_s"], 2)
    for r in rows:
        if r["batch"] == 64:
            key = "batch64_linear_ce_fraction_of_peak" if r["linear_ce"] else "batch64_fraction_of_peak"
            summary[key] = round(r["tflops"] / peak, 3)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
