#!/usr/bin/env bash
# Issue 26's cold-start figure in one device call: seconds from `lat-tui --plan` to the suite's first
# optimizer step, on an empty Triton cache and then on the cache that run filled.
#
#   bash bench/coldstart.sh [OUT] [STEPS]     # OUT default $OUT or /tmp/lat-coldstart; STEPS default 4
#
# Runs bench/bench_suite_throughput.py's `lat` side (gla_rank_sweep: 8 GLA-1.3B LoRA jobs, the shipped
# SST-2 sample, LAT's defaults: warm start compiles the kernels in the preload before the first fork):
#   1. cold: TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR empty (a fresh machine);
#   2. warm: the same on the cache run 1 left (what every later run on the machine sees);
#   3. with LAT_COLDSTART_VERB=1 also: empty cache, `lat-tui warmup --plan` first (timed), then the run.
# Prints first_step_s and wall_s of each and writes OUT/coldstart.json; the preload's log
# (state-lat/warm/warm.log: each shape's compile time) and every job's train.log stay under OUT.
# Needs what bench/gpu_check.sh installs (torch, fla, ...) on PYTHONPATH; a 10-minute device call holds
# runs 1 and 2 when the cold start is near its goal (90 s); set LAT_BENCH_SIDE_TIMEOUT to cut a run short.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-/tmp/lat-coldstart}}
steps=${2:-4}
mkdir -p "$out"
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

# one bench run of the `lat` side on the given Triton cache (copied by the bench into its own folder)
bench() {  # NAME CACHE
  local name=$1 cache=$2
  echo "== coldstart: $name (Triton cache entries: $(find "$cache" -type f | wc -l))"
  TRITON_CACHE_DIR=$cache TORCHINDUCTOR_CACHE_DIR=$out/$name/inductor \
    python "$here/bench/bench_suite_throughput.py" --gpu 0 --sides lat --steps "$steps" \
      --out "$out/$name" --json "$out/$name.json"
  grep -h "kernel" "$out/$name/state-lat/warm/warm.log" || true
}

rm -rf "$out/cold" "$out/warm" "$out/verb" "$out/empty-cache"
mkdir -p "$out/empty-cache"
bench cold "$out/empty-cache"
bench warm "$out/cold/triton-cache-lat"   # the copy run 1 compiled into
if [[ ${LAT_COLDSTART_VERB:-0} == 1 ]]; then
  mkdir -p "$out/verb/cache"
  started=$(date +%s.%N)
  TRITON_CACHE_DIR=$out/verb/cache python -m lat_tui.cli warmup --plan "$out/cold/state-lat.plan.yaml" --gpus 0
  echo "warmup verb: $(python -c "import time; print(round(time.time() - $started, 1))") s"
  bench verb-run "$out/verb/cache"
fi
python - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {p.stem: json.loads(p.read_text())[0] for p in sorted(out.glob("*.json")) if p.stem != "coldstart"}
summary = {name: {k: r.get(k) for k in ("first_step_s", "wall_s", "steady_tokens_per_s", "gpu_peak_used_gib")}
           for name, r in rows.items()}
(out / "coldstart.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
PY
