"""Bad input to ``lat-tui``, as a user gives it: each ends with exit 2 and one message naming the file
or directory at fault, and nothing is created (no state directory, no run, no output root)."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_EXPERIMENT = ROOT / "configs" / "experiments" / "gla" / "tiny_lora_qkvo.yaml"
RANDOM_BYTES = random.Random(25).randbytes(400)  # not UTF-8 (checked below)
NOT_UTF8 = bytes(range(0x80, 0x100)) * 2
WITH_NUL = b"pairs: [\x00]\n"  # UTF-8, but a binary file


def lat(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full.pop("LAT_CONFIGS", None)
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", *args], capture_output=True, text=True,
                          timeout=HANG_S, env=full)


def assert_refused(out: subprocess.CompletedProcess, *, names: list[str], created: list[Path]) -> None:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    for text in names:
        assert text in out.stderr, out.stderr
    assert [p for p in created if p.exists()] == []


@pytest.mark.parametrize("raw, why", [(RANDOM_BYTES, "binary file"), (NOT_UTF8, "not UTF-8 text (byte 0x80"),
                                      (WITH_NUL, "binary file (NUL byte at offset 8)")],
                         ids=["random", "latin1", "nul"])
def test_a_plan_of_random_bytes_is_refused_naming_the_file(tmp_path, raw, why):
    plan = tmp_path / "bad.yaml"
    plan.write_bytes(raw)
    if raw is not WITH_NUL:
        with pytest.raises(UnicodeDecodeError):  # what the plan's reader used to raise as a traceback
            raw.decode("utf-8")
    state, out_root = tmp_path / "state", tmp_path / "out"
    out = lat("--plan", str(plan), "--state-dir", str(state), "--output-root", str(out_root))
    assert_refused(out, names=["Invalid plan", str(plan), why], created=[state, out_root])


def user_tree(tmp_path: Path, bad: str, raw: bytes) -> Path:
    """A config tree whose suite ``s`` reaches a file of ``raw`` bytes: the suite itself, its
    experiment config, or the PEFT spec that config names."""
    tree = tmp_path / "configs"
    for kind in ("suites", "experiments", "peft"):
        (tree / kind).mkdir(parents=True)
    (tree / "suites" / "s.yaml").write_text("rounds:\n  1: [x.yaml]\n")
    (tree / "experiments" / "x.yaml").write_text(
        SHIPPED_EXPERIMENT.read_text().replace("  method: lora\n", "  spec: junk\n"))
    (tree / "peft" / "junk.yaml").write_text("r: 4\n")
    target = {"suite": tree / "suites" / "s.yaml", "experiment": tree / "experiments" / "x.yaml",
              "peft": tree / "peft" / "junk.yaml"}[bad]
    target.write_bytes(raw)
    return target


@pytest.mark.parametrize("bad", ["suite", "experiment", "peft"])
@pytest.mark.parametrize("named_by", ["plan", "flags"])
def test_random_bytes_in_a_file_the_plan_reaches_are_refused_naming_it(tmp_path, bad, named_by):
    target = user_tree(tmp_path, bad, RANDOM_BYTES)
    state, out_root = tmp_path / "state", tmp_path / "out"
    if named_by == "plan":
        plan = tmp_path / "plan.yaml"
        plan.write_text(f"suites: [s]\npairs: ['1:tiny-sst2']\ngpus: cpu\noutput_root: {out_root}\n")
        args = ["--plan", str(plan)]
    else:
        args = ["--suite", "s", "--pairs", "1:tiny-sst2", "--gpus", "cpu", "--output-root", str(out_root)]
    out = lat(*args, "--configs", str(tmp_path / "configs"), "--state-dir", str(state))
    assert_refused(out, names=[str(target), "binary file"], created=[state, out_root])


def test_ten_thousand_bad_pairs_give_one_short_grouped_message(tmp_path):
    state = tmp_path / "state"
    pairs = " ".join(f"{seed}:x" for seed in range(1, 10_001))  # one argument: at most 128 KiB
    out = lat("--suite", "demo", "--pairs", pairs, "--gpus", "cpu", "--state-dir", str(state))
    assert_refused(out, names=["unknown dataset 'x'", "in 10,000 pairs: 1:x, 2:x, 3:x ... (9,997 more)"],
                   created=[state])
    assert len(out.stderr) < 1000


def test_ten_thousand_different_bad_pairs_are_capped(tmp_path):
    state = tmp_path / "state"
    pairs = " ".join(f"{seed}:x{seed}" for seed in range(1, 10_001))
    out = lat("--suite", "demo", "--pairs", pairs, "--gpus", "cpu", "--state-dir", str(state))
    assert out.returncode == 2 and "unknown dataset 'x1'" in out.stderr, out.stderr
    assert out.stderr.rstrip().endswith("... and 9,980 more problems") and len(out.stderr) < 10_000
    assert not state.exists()


def test_ten_thousand_malformed_pairs_give_a_short_message(tmp_path):
    out = lat("--suite", "demo", "--pairs", " ".join(f"bad{i}" for i in range(10_000)), "--gpus", "cpu",
              "--state-dir", str(tmp_path / "state"))
    assert_refused(out, names=["pair 'bad0': expected 'seed:dataset'"], created=[tmp_path / "state"])
    assert len(out.stderr) < 1000


@pytest.mark.parametrize("verb", [["status"], ["status", "--json"], ["runs"], ["runs", "--json"], ["show", "1"],
                                  ["logs", "1"], ["wait"], ["cancel", "1"], ["results"]],
                         ids=" ".join)
@pytest.mark.parametrize("given_by", ["flag", "env"])
def test_reading_a_state_directory_that_does_not_exist_creates_nothing(tmp_path, verb, given_by):
    state = tmp_path / "typo" / "state"
    flags = ["--state-dir", str(state)] if given_by == "flag" else []
    out = lat(*verb, *flags, env={"LAT_STATE_DIR": str(state if given_by == "env" else tmp_path / "unused")})
    assert_refused(out, names=["No state", str(state), "no such directory"], created=[tmp_path / "typo"])
    assert out.stdout == ""


def test_a_state_directory_without_a_journal_is_no_state_and_stays_empty(tmp_path):
    state = tmp_path / "empty"
    state.mkdir()
    out = lat("runs", "--json", "--state-dir", str(state))
    assert_refused(out, names=["No state", str(state), "no journal (journal.sqlite)"], created=[])
    assert list(state.iterdir()) == []


def test_the_trainer_refuses_a_job_file_of_random_bytes_naming_it(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_bytes(RANDOM_BYTES)
    out = subprocess.run([sys.executable, "-m", "lat_core.train", "--cfg", str(job)], capture_output=True, text=True,
                         timeout=HANG_S, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"error: --cfg: {job}: not UTF-8 text" in out.stderr
