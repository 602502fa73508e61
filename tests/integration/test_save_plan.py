"""``--save-plan`` writes a plan that replays as it was made: the user's config tree (``--configs``
or ``$LAT_CONFIGS``) is recorded in it, absolute, so the saved file runs the same suites from any
folder and any shell; a plan written by hand may name its tree relative to its own folder."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from lat_core.front.service import prepare_run
from lat_core.monitor.fake_nvml import FakeNvml
from lat_core.monitor.gpu import GpuProbe
from lat_tui.cli import build_parser, plan_from_args
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]


def user_tree(where: Path) -> Path:
    """A tree of one's own holding suite E4 (unknown to the shipped tree) of one config, my_e4."""
    (where / "suites").mkdir(parents=True)
    (where / "experiments" / "gla").mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "experiments" / "gla" / "tiny_lora_qkvo.yaml", where / "experiments" / "gla" / "my_e4.yaml")
    (where / "suites" / "E4.yaml").write_text(yaml.safe_dump({"rounds": {1: ["gla/my_e4.yaml"]}}))
    return where


def lat(cwd: Path, *args: str, configs_env: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LAT_CONFIGS", "GPU_IDS", "GPU_PLAN", "DATA", "HP_SEED")}
    env["PYTHONPATH"] = str(ROOT)
    if configs_env is not None:
        env["LAT_CONFIGS"] = str(configs_env)
    return subprocess.run([sys.executable, "-m", "lat_tui.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=HANG_S)


def saved(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_a_plan_saved_with_lat_configs_replays_from_elsewhere_without_it(tmp_path, monkeypatch):
    tree = user_tree(tmp_path / "my-configs")
    made = lat(tmp_path, "--suite", "E4", "--pairs", "1:tiny-sst2", "--gpus", "cpu", "--save-plan", "e4.yaml",
               configs_env=tree)
    assert made.returncode == 0, made.stderr
    assert saved(tmp_path / "e4.yaml")["configs"] == str(tree)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "e4.yaml").rename(elsewhere / "moved.yaml")  # the plan moves; the tree stays
    again = lat(elsewhere, "--plan", "moved.yaml", "--save-plan", "again.yaml")
    assert again.returncode == 0, again.stderr  # was: unknown suite 'E4'
    assert saved(elsewhere / "again.yaml") == saved(elsewhere / "moved.yaml")
    monkeypatch.delenv("LAT_CONFIGS", raising=False)
    monkeypatch.chdir(elsewhere)
    plan = plan_from_args(build_parser().parse_args(["--plan", "moved.yaml"]))
    prepared = prepare_run(plan, probe=GpuProbe(FakeNvml.with_gpus(0)), hub_probe=lambda environ: True, environ={})
    assert [job.key for job in prepared.jobs] == ["tiny-sst2_seed1/my_e4"]  # expanded from the recorded tree


def test_a_hand_written_plan_names_its_tree_from_its_own_folder_and_configs_wins(tmp_path):
    tree = user_tree(tmp_path / "project" / "my-configs")
    plans = tmp_path / "project" / "plans"
    plans.mkdir()
    (plans / "e4.yaml").write_text(yaml.safe_dump({"suites": ["E4"], "pairs": ["1:tiny-sst2"], "gpus": "cpu",
                                                   "configs": "../my-configs"}))
    made = lat(tmp_path, "--plan", "project/plans/e4.yaml", "--save-plan", "saved.yaml")
    assert made.returncode == 0, made.stderr
    assert saved(tmp_path / "saved.yaml")["configs"] == str(tree)
    other = user_tree(tmp_path / "other")
    (other / "suites" / "E5.yaml").write_text(yaml.safe_dump({"rounds": {1: ["gla/my_e4.yaml"]}}))
    flag = lat(tmp_path, "--plan", "project/plans/e4.yaml", "--suite", "E5", "--configs", "other",
               "--save-plan", "flag.yaml")  # a relative --configs is from the shell's folder, not the plan's
    assert flag.returncode == 0, flag.stderr
    assert saved(tmp_path / "flag.yaml")["configs"] == str(other)


def test_a_plan_whose_tree_is_gone_names_the_field(tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"suites": ["E4"], "pairs": ["1:tiny-sst2"], "gpus": "cpu",
                                                     "configs": "gone"}))
    done = lat(tmp_path, "--plan", "p.yaml", "--save-plan", "out.yaml")
    assert done.returncode == 2
    assert f"field 'configs': no directory {tmp_path / 'gone'}" in done.stderr
    assert not (tmp_path / "out.yaml").exists()
