#!/usr/bin/env bash
# A Mamba-130m-sized LoRA job (random weights, transformers' Mamba) on GPU 0, through the trainer as the
# engine launches it: prints the start-up note about transformers' fast path and the step timing.
#   bash bench/mamba_gpu_job.sh OUT_DIR [STEPS]
set -euo pipefail
out=${1:?usage: bench/mamba_gpu_job.sh OUT_DIR [STEPS]}; steps=${2:-30}
mkdir -p "$out"
cat > "$out/job.yaml" <<YAML
name: mamba130m_lora
model: {family: mamba, name_or_path: tiny-random, dtype: bfloat16,
        tiny: {hidden_size: 768, num_hidden_layers: 24, state_size: 16, vocab_size: 50280}}
peft: {method: lora, r: 8, alpha: 16, target_modules: [in_proj, x_proj]}
data: tiny-sst2
seed: 1
train: {batch_size: 8, lr: 0.0005, max_steps: $steps, eval_every: $steps, save_every: $steps, max_seq_len: 128, log_every: 1}
output_dir: $out
resolved: true
YAML
python3 -m lat_core.train --cfg "$out/job.yaml" > "$out/train.log" 2>&1 || { tail -30 "$out/train.log"; exit 1; }
grep -iE "fast path|mamba_ssm|causal" "$out/train.log" | head -5
python3 - "$out/events.jsonl" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
started = next(e for e in events if e.get("event") == "started")
steps = [e for e in events if e.get("event") == "step"]
print("mamba_fast_path:", started.get("mamba_fast_path"))
mid = steps[len(steps) // 3:]
dt = (mid[-1]["t"] - mid[0]["t"]) / max(1, mid[-1]["step"] - mid[0]["step"])
print(f"steps {len(steps)}; steady {dt * 1000:.0f} ms/step; tokens/step {8 * 128}; final loss {steps[-1].get('loss')}")
PY
