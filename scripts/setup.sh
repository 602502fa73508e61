#!/usr/bin/env bash
# One-step set-up for a fresh machine.
#   bash scripts/setup.sh demo   install, then run the demo plan (4 tiny CPU jobs, headless)
#   bash scripts/setup.sh test   install with test extras, then ruff, the import contracts, mypy on the contract and the front end and the test suite (GPU tests skipped)
# Creates .venv in the repository. Where no NVIDIA GPU is visible the CPU build of torch is
# installed first, so the dependency range never pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-demo}
PY=${PYTHON:-python3}
# Each step says when it starts, counted from the script's start, so a slow one shows where it is.
step() { printf '==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
. .venv/bin/activate
# pip's own progress shows (a first install downloads for minutes); one noisy warning is dropped.
# pipefail makes a failed pip fail this script (grep's status would otherwise be the pipe's).
pip() {
  step "pip $*"
  python -m pip --disable-pip-version-check "$@" 2>&1 | { grep --line-buffered -v "^WARNING: Location" || true; }
}
# is torch installed? found, not imported (an import takes 10-15 s, silent)
if ! python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    step "no NVIDIA GPU visible: the CPU build of torch first"
    pip install "torch==${LAT_CPU_TORCH:-2.13.0}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
  fi
fi
# An editable install leaves the sources uncompiled; where PYTHONDONTWRITEBYTECODE is set, every
# engine, runner and trainer process would compile them again (pip compiles what it installs).
compile_sources() { step "compiling lat_core and lat_tui to bytecode"; python -m compileall -q lat_core lat_tui >/dev/null; }
# METEOR's WordNet 3.0 (lat_core/train/nltk_data.py): no PyPI package carries it, Debian's
# wordnet-base does. Without it METEOR is left out of DART's metrics (said in the job's log and
# under the results table) and its parity tests skip. A half-configured dpkg (an image built with
# one) is finished first when apt refuses for that.
install_wordnet() {
  [[ -e /usr/share/wordnet/data.noun || -n "${WNSEARCHDIR:-}" ]] && return 0
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    step "no WordNet: METEOR left out (sudo apt-get install wordnet-base, or python -m nltk.downloader wordnet)"
    return 0
  fi
  step "apt-get install wordnet-base (METEOR's WordNet 3.0)"
  apt_wordnet() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wordnet-base >/dev/null; }
  { apt-get update -qq && { apt_wordnet || { dpkg --configure -a && apt_wordnet; }; }; } \
    || step "wordnet-base not installed: METEOR left out, its tests skip"
}
case "$what" in
  demo)
    pip install -e .
    python -c "import lat_core, lat_tui" # fail loudly if the install did not take
    compile_sources
    step "the demo plan: 4 tiny CPU jobs, two at a time"
    exec lat-tui --plan configs/plans/demo.yaml ;;
  test)
    pip install -e ".[test]"
    python -c "import lat_core, lat_tui, pytest"
    install_wordnet
    compile_sources
    step "ruff: pyflakes and the layering rules (banned-api)"
    ruff check .  # the layering rules (banned-api) and pyflakes, before the tests
    step "lint-imports: the process boundaries, indirect imports included (pyproject.toml)"
    lint-imports
    step "mypy --strict on the contract (lat_core/contract: what crosses a process)"
    mypy --strict lat_core/contract
    step "mypy --strict on the front end (lat_core/front, and the config, triage, monitor and notice code it calls)"
    mypy --strict lat_core/front
    step "mypy on the engine (lat_core/engine: its parts over a declared state)"
    mypy lat_core/engine
    step "the test suite in 4 workers (GPU tests skipped where no GPU is; tests running past 2 min are named)"
    # most tests wait on real processes (engines, trainers, tmux), so 4 workers fit 2 cores;
    # tests sharing one thing of the host are kept in one worker (tests/conftest.py)
    status=0
    python -m pytest -m "not gpu" -q -n 4 --dist loadgroup --durations=15 || status=$?
    step "done (pytest exit $status)"
    exit "$status" ;;
  *) echo "usage: bash scripts/setup.sh demo|test" >&2; exit 2 ;;
esac
