"""bench/autotune_contention.py without a GPU: which picks differ from the lone tuning's, one timing
per distinct set of picks, and a clear refusal where there is nothing to measure."""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import autotune_contention as A

ALONE = {"k1|[16]": "a", "k1|[32]": "b", "k2|[16]": "c"}


def test_picks_that_differ_from_the_lone_tuning_are_named_per_process():
    contended = {"contended-0": dict(ALONE), "contended-1": {**ALONE, "k1|[32]": "z"},
                 "contended-2": {k: v for k, v in ALONE.items() if k != "k2|[16]"}}   # never tuned k2 there
    got = A.compare_picks(ALONE, contended)
    assert got["keys"] == 3
    assert got["differ_per_process"] == {"contended-0": 0, "contended-1": 1, "contended-2": 1}
    assert got["differing_keys"] == ["k1|[32]", "k2|[16]"] and got["differ_in_any"] == 2


def test_each_distinct_set_of_picks_is_timed_once_the_lone_one_first():
    contended = {"contended-0": dict(ALONE), "contended-1": {**ALONE, "k1|[32]": "z"},
                 "contended-2": {**ALONE, "k1|[32]": "z"}}
    assert A.distinct_tables(ALONE, contended) == {"alone": "alone,contended-0",
                                                   "contended-1": "contended-1,contended-2"}


def test_the_suite_shape_is_the_benchs_gla_layer_at_one_width():
    shape = A.suite_shape(16, 8)
    assert shape.widths == (16,) and shape.rows == 8 and not shape.eager
    assert dict(shape.tiny)["hidden_size"] == 2048 and shape.dtype == "bfloat16"


def test_without_a_gpu_it_says_so_and_exits_2(capsys, tmp_path):
    assert A.main(["--out", str(tmp_path)]) == 2
    assert "nothing to measure" in capsys.readouterr().err
    assert not (tmp_path / "contention.json").exists()


def _table(kernels: dict) -> str:
    return json.dumps({"gpu": "NVIDIA H200", "kernels": kernels})


def _entry(key: int, warps: int) -> dict:
    return {"key": [key, "torch.bfloat16"], "config": {"kwargs": {"BT": 16}, "num_warps": warps}}


class FakeTunings:
    """Real child processes that each save a table as a tuning would: contended-1 picks another
    config for key 32; the timings are made up per table (the shipped one is asked for as None)."""

    def __init__(self):
        self.timed: list[str] = []

    def tune(self, shapes: Path, name: str, out: Path) -> subprocess.Popen:
        warps = 8 if name == "contended-1" else 4
        table = _table({"k1": [_entry(16, 4), _entry(32, warps)]})
        folder = out / "tables" / name
        folder.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen([sys.executable, "-c", f"import pathlib; pathlib.Path({str(folder / 'NVIDIA_H200.json')!r})"
                                 f".write_text({table!r})"])

    def time(self, shapes: Path, tables: Path | None, out: Path, repeats: int) -> dict:
        name = tables.name if tables is not None else "shipped"
        self.timed.append(name)
        return {"seeded": 2, "eager_ms": 10.0, "graph_ms": 2.0 if name != "contended-1" else 2.5}


def test_a_run_compares_every_tuning_with_the_lone_one_and_times_each_distinct_set(tmp_path):
    shipped = tmp_path / "NVIDIA_H200.json"   # tuned alone elsewhere: key 32 as contended-1, and a key of another shape
    shipped.write_text(_table({"k1": [_entry(16, 4), _entry(32, 8), _entry(64, 2)]}))
    fake = FakeTunings()
    args = argparse.Namespace(out=str(tmp_path / "out"), processes=3, width=16, rows=8, repeats=5)
    result = A.run(args, tune_fn=fake.tune, time_fn=fake.time, shipped=shipped)
    assert result == json.loads((tmp_path / "out" / "contention.json").read_text())
    assert result["picks"]["differ_per_process"] == {"contended-0": 0, "contended-1": 1, "contended-2": 0}
    assert result["shipped_vs_alone"]["differ_per_process"] == {"shipped": 1}   # key 64 is not this shape's
    assert fake.timed == ["alone", "contended-1", "alone"]   # shipped shares contended-1's picks
    timed = result["step_ms"]
    assert timed["contended-1"]["shared_by"] == "contended-1,shipped"
    assert timed["contended-1"]["graph_vs_alone"] == 1.25 and timed["alone-again"]["graph_vs_alone"] == 1.0
    assert set(result["tune_wall_s"]["contended"]) == {"contended-0", "contended-1", "contended-2"}


def test_the_picks_are_saved_before_the_timings_run(tmp_path):
    fake = FakeTunings()

    def timing_fails(*_args):
        raise SystemExit("timing failed")

    args = argparse.Namespace(out=str(tmp_path), processes=2, width=16, rows=8, repeats=5)
    with pytest.raises(SystemExit):
        A.run(args, tune_fn=fake.tune, time_fn=timing_fails)
    saved = json.loads((tmp_path / "contention.json").read_text())
    assert saved["picks"]["differ_per_process"] == {"contended-0": 0, "contended-1": 1} and "step_ms" not in saved


def test_a_tuning_that_fails_or_hangs_is_named_and_the_others_are_killed(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    failed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(SystemExit, match="the tuning bad failed .exit 3."):
        A.finish({"slow": sleeper, "bad": failed}, time.time())
    assert sleeper.poll() is not None
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(SystemExit, match=r"\['hung'\] still tuning after 0 s: killed"):
        A.finish({"hung": hung}, time.time(), timeout_s=0.2)
    assert hung.poll() is not None


def test_children_tune_and_time_with_their_own_cache_and_tables_whatever_the_caller_set(tmp_path, monkeypatch):
    monkeypatch.setenv("LAT_KERNEL_TUNINGS", "off")
    monkeypatch.setenv("LAT_KERNEL_TUNINGS_DIR", "/somewhere/else")
    env = A.child_env(tmp_path / "cache", tmp_path / "tables")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cache") and env["LAT_KERNEL_TUNINGS_DIR"] == str(tmp_path / "tables")
    assert "LAT_KERNEL_TUNINGS" not in env
    assert "LAT_KERNEL_TUNINGS_DIR" not in A.child_env(tmp_path / "cache", None)   # the shipped tables
    assert str(A.ROOT) in env["PYTHONPATH"].split(os.pathsep)


def test_a_rerun_into_the_same_folder_reads_only_its_own_tunings(tmp_path):
    stale = tmp_path / "tables" / "contended-1" / "NVIDIA_H100.json"   # a former run's, of another GPU name
    stale.parent.mkdir(parents=True)
    stale.write_text(_table({"k1": [_entry(16, 2)]}))
    warm = tmp_path / "caches" / "alone" / "kernel.cubin"
    warm.parent.mkdir(parents=True)
    warm.write_text("compiled")
    args = argparse.Namespace(out=str(tmp_path), processes=2, width=16, rows=8, repeats=5)
    result = A.run(args, tune_fn=FakeTunings().tune, time_fn=FakeTunings().time)
    assert not stale.exists() and not warm.exists()
    assert result["picks"]["differ_per_process"] == {"contended-0": 0, "contended-1": 1}
