"""The suite bench called again into the same ``--out`` (as ``--side-caches keep`` asks: a cold call, then
a warm one) trains every side again."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench(cwd: Path, *extra: str) -> list[dict]:
    """The bench on the CPU (tiny Mamba models: mamba_lora's two configs), 2 steps, the old scripts' side: its
    trainers refused the earlier call's folders, as a lat side's engine found its jobs succeeded in the earlier
    call's journal and trained nothing (one clearing of the side's outputs mends both; the old side is the
    cheap one to run twice)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAT_STATE_DIR": str(cwd / "unused-state")}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_suite_throughput.py"), "--gpu", "-1",
                           "--suite", "mamba_lora", "--steps", "2", "--sides", "old", "--out", str(cwd / "out"),
                           "--json", "sides.json", *extra], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((cwd / "sides.json").read_text())


def test_a_second_call_into_the_same_out_trains_every_side_again(tmp_path):
    first = bench(tmp_path)
    started = time.time()
    again = bench(tmp_path, "--side-caches", "keep")
    assert [r["side"] for r in again] == ["old"]
    for side in again:
        assert side["jobs"] == 2 and all(len(losses) == 2 for losses in side["losses"].values()), side
        # its own jobs' first steps, after this call started (not the first call's, read back)
        assert 0 < side["first_step_s"] < time.time() - started, side
    assert [r["side"] for r in first] == ["old"]
