"""Installed from a wheel (not editable, no checkout in sight), LAT finds its shipped configs and
runs the demo plan from another directory.

To stay fast, the fresh venv gets only the wheel (no dependencies); the test interpreter's
site-packages is appended through a .pth file for torch & co. A directory named in a .pth line is
not a site directory, so its own .pth files (an editable install of the checkout) are not run and
lat_core can only come from the wheel.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from tests.helpers.waits import HANG_S

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("lat_core", "lat_tui", "configs", "pyproject.toml", "setup.py", "README.md")


def _run(argv, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{argv} -> {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy, so the build's build/ and *.egg-info never land in the checkout
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        kw = {"ignore": shutil.ignore_patterns("__pycache__", "*.pyc")} if (ROOT / name).is_dir() else {}
        copy(ROOT / name, src / name, **kw)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src)])
    wheel = next((tmp / "dist").glob("lat_control_center-*.whl"))
    env_dir = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)])
    _run([*pip, "--python", str(env_dir / "bin" / "python"), "install", "--no-deps", "--no-index", str(wheel)])
    purelib = Path(_run([str(env_dir / "bin" / "python"), "-c",
                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (purelib / "_lat_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir


def _clean_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LAT_CONFIGS", "VIRTUAL_ENV")}
    return {**env, "LAT_STATE_DIR": str(tmp / "state"), "PYTHONNOUSERSITE": "1"}


@pytest.mark.slow
def test_wheel_ships_configs_as_package_data(venv, tmp_path):
    code = "import lat_core.config.paths as p; print(p.shipped_configs()); print(p.__file__)"
    shipped, module = _run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path,
                           env=_clean_env(tmp_path)).stdout.split()
    assert Path(module).is_relative_to(venv) and Path(shipped) == Path(module).parents[1] / "configs"
    for part in ("suites/demo.yaml", "plans/demo.yaml", "peft/lora_qkvo_r8.yaml", "pretrain/balanced.yaml",
                 "experiments/gla/tiny_lora_qkvo.yaml", "README.md"):
        assert (Path(shipped) / part).is_file(), part
    listing = _run([str(venv / "bin" / "lat-tui"), "suites"], cwd=tmp_path, env=_clean_env(tmp_path)).stdout
    assert "demo " in listing and f"shipped {shipped}" in listing


@pytest.mark.slow
def test_wheel_runs_the_demo_plan_outside_the_checkout(venv, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    done = subprocess.run([str(venv / "bin" / "lat-tui"), "--plan", "demo", "--pairs", "1:tiny-sst2"],
                          cwd=outside, env=_clean_env(tmp_path), capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2/2 jobs succeeded" in done.stdout
    for config in ("tiny_lora_qkvo", "tiny_lora"):
        assert (outside / "runs/demo/tiny-sst2_seed1" / config / "events.jsonl").is_file()
