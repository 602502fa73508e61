#!/usr/bin/env bash
# One GPU check on a bare GPU machine that has torch (the lent device; any server of ours):
#   bash bench/gpu_check.sh start [--tests-only | --bench-only | --contention-only [--width W]] [--steps N]
#                                 [--data D] [--sides S] [-- PYTEST_ARGS...]
#   bash bench/gpu_check.sh poll SECONDS     # wait until done or SECONDS passed; the logs' tails
#   bash bench/gpu_check.sh finish [DIR]     # logs, JSON and the Triton cache into DIR (default $OUT)
#
# start: installs the wheels brought along in .whl/ ($LAT_GPU_CHECK_WHEELS) for what the machine lacks (fla, pydantic,
# textual, ...; into a folder of their own, never over the machine's torch), copies the tree to a
# folder of its own (a detached run must not depend on the caller's working directory, which a lent
# device removes after each call), restores the Triton cache carried in .tcache/ (kernels compile
# for 6-12 minutes on a fresh machine: once per machine and shape, not once per call), then runs,
# detached (setsid): `pytest -m gpu tests/gpu` (the OOM and monitor tests alone on the card first:
# the OOM test fills it), then the suite bench on both data sets (sides old, lat-eager, lat; --data and
# --sides choose others, as the bench's own options: --data long --sides lat-eager).
# --contention-only: bench/autotune_contention.py instead (fla's autotune picks under eight processes
# against one alone, each set of picks timed as a graphed and an eager step; 15-20 minutes), its
# contention.json among the logs (written after each stage: the picks stand if the timings fail);
# --width: its row width (default 16, the SST-2 suite's; 256 for --data long's rows).
# Everything it writes is under $LAT_GPU_CHECK_DIR (default /tmp/lat-gpu-check): tree/, site/,
# tcache/, logs/. finish packs the cache as xz pieces under 15 MB (tcache/tc.xz.*), keeping only
# what Triton loads (bench/triton_cache.py), so the next call can carry it back as .tcache/.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${LAT_GPU_CHECK_DIR:-/tmp/lat-gpu-check}
logs=$work/logs
pidfile=$work/run.pid

running() { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

environment() {
  export PYTHONPATH=$work/tree:$work/site TRITON_CACHE_DIR=$work/tcache \
         TORCHINDUCTOR_CACHE_DIR=$work/tcache/inductor TRITON_CACHE_AUTOTUNING=1 PYTHONUNBUFFERED=1
}

install_wheels() {
  [[ -d $work/site ]] && return 0
  mkdir -p "$work/site"
  local wheels=${LAT_GPU_CHECK_WHEELS:-$here/.whl}
  if compgen -G "$wheels/*.whl" >/dev/null; then
    # with their bytecode, as pip installs them for a user: else the first import on a fresh machine
    # compiles fla's sources (up to ~10 s measured), inside the cold start this check times
    python3 -m pip install -q --no-index --no-deps --target "$work/site" "$wheels"/*.whl
  fi
  local missing
  missing=$(PYTHONPATH=$work/site python3 -c "
import importlib.util as u
print(' '.join(m for m in ('torch', 'fla', 'pydantic', 'textual', 'pytest', 'yaml', 'psutil') if u.find_spec(m) is None))")
  [[ -z $missing ]] || { echo "gpu_check: missing on this machine and not in .whl/: $missing" >&2; return 1; }
}

restore_cache() {
  [[ -d $work/tcache ]] && return 0
  if compgen -G "$here/.tcache/tc.xz.*" >/dev/null; then
    cat "$here"/.tcache/tc.xz.* | xz -d | tar -C "$work" -x
    python3 "$here/bench/triton_cache.py" relocate "$work/tcache"   # its groups name the paths it was packed from
  else
    mkdir -p "$work/tcache"
  fi
  echo "gpu_check: Triton cache entries at start: $(find "$work/tcache" -type f | wc -l)"
}

start() {
  local what=all steps=100 width=16 data=tiny,long sides=old,lat-eager,lat pytest_args=()
  while (($#)); do
    case $1 in
      --tests-only) what=tests ;;
      --bench-only) what=bench ;;
      --contention-only) what=contention ;;
      --steps) steps=$2; shift ;;
      --width) width=$2; shift ;;
      --data) data=$2; shift ;;
      --sides) sides=$2; shift ;;
      --) shift; pytest_args=("$@"); break ;;
      *) echo "gpu_check start: unknown option $1" >&2; exit 2 ;;
    esac
    shift
  done
  running && { echo "gpu_check: a check is already running (pid $(cat "$pidfile"))" >&2; exit 1; }
  mkdir -p "$work" "$logs"
  install_wheels
  restore_cache
  rm -rf "$work/tree" && mkdir -p "$work/tree"
  (cd "$here" && tar --exclude=./.whl --exclude=./.tcache --exclude=./.venv --exclude=./.git -c .) | tar -C "$work/tree" -x
  environment
  ((${#pytest_args[@]})) || pytest_args=(tests/gpu)
  printf '%q ' "${pytest_args[@]}" > "$work/pytest_args"
  printf '%q ' --data "$data" --sides "$sides" > "$work/bench_args"
  rm -f "$pidfile"
  # only the run goes to the background: no launcher subshell outlives this call holding the caller's
  # stdout, and the pid poll waits on is the run's own (run writes it)
  (cd "$work/tree" || exit 1
   setsid nohup bash "$work/tree/bench/gpu_check.sh" run "$what" "$steps" "$width" \
     > "$logs/driver.log" 2>&1 < /dev/null &)
  for _ in $(seq 50); do [[ -s $pidfile ]] && break; sleep 0.2; done   # run writes its own pid
  echo "gpu_check: started (pid $(cat "$pidfile" 2>/dev/null || echo '?')); logs in $logs"
}

# The detached part, run from the tree's copy.
run() {
  echo $$ > "$pidfile"   # its own pid: the launcher's (setsid may fork) was gone after start's call, and poll saw nothing
  local what=$1 steps=$2 width=$3 pytest=(python3 -m pytest -v -rA -p no:cacheprovider --timeout 1800 --durations=0 -m gpu)
  environment
  cd "$work/tree"
  if [[ $what == all || $what == tests ]]; then
    eval "set -- $(cat "$work/pytest_args")"
    local alone=() rest=()
    for arg in "$@"; do [[ $arg == tests/gpu || $arg == tests/gpu/ ]] && alone+=(tests/gpu/test_monitor_and_oom_gpu.py); done
    for arg in "$@"; do [[ $arg == tests/gpu || $arg == tests/gpu/ ]] && rest+=(tests/gpu --deselect tests/gpu/test_monitor_and_oom_gpu.py) || rest+=("$arg"); done
    ((${#alone[@]})) && { "${pytest[@]}" "${alone[@]}" > "$logs/tests_alone.log" 2>&1 || true; }
    "${pytest[@]}" "${rest[@]}" > "$logs/tests.log" 2>&1 || true
  fi
  if [[ $what == all || $what == bench ]]; then
    eval "set -- $(cat "$work/bench_args")"
    python3 bench/bench_suite_throughput.py --gpu 0 --steps "$steps" "$@" \
      --out "$work/suite" --json "$logs/suite.json" > "$logs/suite.log" 2>&1 || true
  fi
  if [[ $what == contention ]]; then
    python3 bench/autotune_contention.py --out "$work/contention" --width "$width" > "$logs/contention.log" 2>&1 || true
    cp "$work/contention/contention.json" "$logs/" 2>/dev/null || true
  fi
  echo "gpu_check: done $(date -u +%FT%TZ)" >> "$logs/driver.log"
}

poll() {
  local seconds=${1:-540} waited=0
  while running && ((waited < seconds)); do sleep 5; waited=$((waited + 5)); done
  running && echo "gpu_check: still running after ${waited} s" || echo "gpu_check: not running (done or never started)"
  for f in "$logs"/*.log; do [[ -f $f ]] && { echo "== $f"; tail -n 15 "$f"; }; done
}

finish() {
  local dest=${1:-${OUT:?give a folder or set OUT}}
  mkdir -p "$dest"
  cp "$logs"/* "$dest"/ 2>/dev/null || true
  if [[ -d $work/tcache ]]; then
    python3 "$here/bench/triton_cache.py" strip "$work/tcache"
    mkdir -p "$dest/tcache"
    tar -C "$work" -c tcache | xz -6 -T0 | split -b 15M - "$dest/tcache/tc.xz."
  fi
  running && echo "gpu_check: packed while the check still runs (poll again next call)"
  ls -la "$dest" "$dest/tcache" 2>/dev/null || true
}

case ${1:-} in
  start) shift; start "$@" ;;
  run) shift; run "$@" ;;
  poll) shift; poll "$@" ;;
  finish) shift; finish "$@" ;;
  *) echo "usage: bash bench/gpu_check.sh start [--tests-only|--bench-only|--contention-only [--width W]] [--steps N] [--data D] [--sides S] [-- PYTEST_ARGS] | poll SECONDS | finish [DIR]" >&2; exit 2 ;;
esac
