"""``lat-tui warmup`` as a user runs it (a subprocess): the shapes of a plan's jobs, the compile in
a child with the trainer's stack (on this machine without a GPU: nothing to compile, exit 0), and
exit 2 for what does not name a plan."""

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]


def warmup(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", "warmup", *args], capture_output=True, text=True,
                          timeout=HANG_S, env=env)


def test_a_suite_prints_its_shapes_and_a_machine_without_a_gpu_compiles_nothing(tmp_path):
    out = warmup("demo", "--pairs", "1:tiny-sst2", env={"TRITON_CACHE_DIR": str(tmp_path / "triton")})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "shape: gla tiny-random float32, 8 rows, widths 16, 32, 48"
    assert f"[warm] Triton cache: {tmp_path / 'triton'}" in lines  # the cache the jobs share
    assert lines[-1] == "[warm] kernel warm-up: no GPU on this machine: nothing to compile"


def test_a_plan_gives_its_jobs_shapes_and_the_triton_cache_its_jobs_use(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"suites: [demo]\npairs: ['1:tiny-sst2']\nenv: {{TRITON_CACHE_DIR: {tmp_path / 'jobs'}}}\n")
    out = warmup("--plan", str(plan))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("shape: gla tiny-random float32, 8 rows, widths 16, 32, 48\n")
    assert f"[warm] Triton cache: {tmp_path / 'jobs'}\n" in out.stdout


def test_an_unknown_suite_or_no_plan_is_a_usage_error():
    unknown = warmup("nosuch", "--pairs", "1:sst2")
    assert unknown.returncode == 2 and "unknown suite 'nosuch'" in unknown.stderr
    neither = warmup()
    assert neither.returncode == 2 and "give --plan or one or more suites" in neither.stderr
