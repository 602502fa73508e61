"""bench/gpu_check.sh as a lent GPU machine runs it, on the CPU: started detached from a copy of the
tree, polled, finished into an output folder with its logs and the Triton cache packed for the next
call (IR files stripped, group files naming only what is kept)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.sh"


def gpu_check(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAT_GPU_CHECK_DIR": str(work), "LAT_GPU_CHECK_WHEELS": str(work / "no-wheels"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=HANG_S)


def a_work_folder(tmp_path: Path) -> Path:
    """gpu_check's folder with no wheels to install and an empty Triton cache already in place."""
    work = tmp_path / "work"
    (work / "no-wheels").mkdir(parents=True)
    (work / "tcache").mkdir()
    return work


def a_cache(root: Path) -> None:
    kernel = root / "tcache" / "ab12"
    kernel.mkdir(parents=True)
    for name in ("k.json", "k.cubin", "k.ptx", "k.ttir"):
        (kernel / name).write_text(name)
    group = {"child_paths": {str(kernel / n): n for n in ("k.json", "k.cubin", "k.ptx", "k.ttir")}}
    (kernel / "__grp__k.json").write_text(json.dumps(group))


def test_a_check_runs_detached_and_brings_back_logs_and_a_stripped_cache(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "no-wheels").mkdir(parents=True)
    a_cache(work)
    started = gpu_check(work, "start", "--tests-only", "--", "tests/gpu/test_monitor_and_oom_gpu.py")
    assert started.returncode == 0 and "started" in started.stdout, started.stderr
    polled = gpu_check(work, "poll", "240")
    assert "not running" in polled.stdout, polled.stdout
    finished = gpu_check(work, "finish", str(out))
    assert finished.returncode == 0, finished.stderr
    log = (out / "tests.log").read_text()
    assert "2 skipped" in log  # the GPU tests ran (and, on the CPU, said why they skip)
    assert "done" in (out / "driver.log").read_text()
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    pieces = sorted((out / "tcache").glob("tc.xz.*"))
    subprocess.run(f"cat {' '.join(map(str, pieces))} | xz -d | tar -C {unpacked} -x", shell=True, check=True)
    kept = sorted(p.name for p in (unpacked / "tcache" / "ab12").iterdir())
    assert kept == ["__grp__k.json", "k.cubin", "k.json"]
    group = json.loads((unpacked / "tcache" / "ab12" / "__grp__k.json").read_text())
    assert sorted(Path(k).name for k in group["child_paths"]) == ["k.cubin", "k.json"]


def test_a_second_start_while_one_runs_is_refused_and_bad_options_are_usage_errors(tmp_path):
    work = a_work_folder(tmp_path)
    assert gpu_check(work, "start", "--fast").returncode == 2
    assert gpu_check(work, "nonsense").returncode == 2
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (work / "run.pid").write_text(str(sleeper.pid))
        again = gpu_check(work, "start", "--tests-only")
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_contention_check_runs_alone_and_on_the_cpu_says_there_is_nothing_to_measure(tmp_path):
    work, out = a_work_folder(tmp_path), tmp_path / "out"
    assert gpu_check(work, "start", "--contention-only").returncode == 0
    assert "not running" in gpu_check(work, "poll", "240").stdout
    assert gpu_check(work, "finish", str(out)).returncode == 0
    assert "no GPU on this machine: nothing to measure" in (out / "contention.log").read_text()
    assert not (out / "tests.log").exists() and not (out / "suite.log").exists()


def test_poll_waits_on_the_detached_run_itself_until_it_ends(tmp_path):
    work, out, release = a_work_folder(tmp_path), tmp_path / "out", tmp_path / "release"
    held = tmp_path / "test_held.py"   # a GPU test that runs until this test releases it
    held.write_text("import pathlib, time, pytest\n\n@pytest.mark.gpu\ndef test_held():\n"
                    f"    while not pathlib.Path({str(release)!r}).exists():\n        time.sleep(0.1)\n")
    assert gpu_check(work, "start", "--tests-only", "--", str(held)).returncode == 0   # returns while it runs
    try:
        pid = int((work / "run.pid").read_text())
        assert "gpu_check.sh\x00run" in Path(f"/proc/{pid}/cmdline").read_text()   # the run, not a launcher
        assert "still running" in gpu_check(work, "poll", "1").stdout
    finally:
        release.touch()
    assert "not running" in gpu_check(work, "poll", "240").stdout
    assert gpu_check(work, "finish", str(out)).returncode == 0
    assert "1 passed" in (out / "tests.log").read_text()


def test_the_bench_runs_the_data_and_sides_asked_for(tmp_path):
    work, out = a_work_folder(tmp_path), tmp_path / "out"
    assert gpu_check(work, "start", "--bench-only", "--data", "long", "--sides", "lat-eager", "--steps", "2").returncode == 0
    assert "not running" in gpu_check(work, "poll", "240").stdout
    assert gpu_check(work, "finish", str(out)).returncode == 0
    log = (out / "suite.log").read_text()
    assert "== long: lat-eager" in log and "tiny" not in log and "== long: old" not in log, log
