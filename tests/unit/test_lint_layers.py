"""The ruff banned-api rules that keep the layers apart really fire where they should, and only there.

Each case lints one import as if it were a file in that layer (``--stdin-filename`` makes ruff pick
the nearest ruff.toml), so a config change that silently drops a ban fails here."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUFF = shutil.which("ruff")

pytestmark = pytest.mark.skipif(RUFF is None, reason="ruff is installed with the test extras")


def banned(path: str, statement: str) -> bool:
    out = subprocess.run([RUFF, "check", "--no-cache", "--select", "TID251", "--stdin-filename", path, "-"],
                         input=f"{statement}\n", text=True, capture_output=True, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr
    return "TID251" in out.stdout


@pytest.mark.parametrize("path, statement", [
    ("lat_core/results/x.py", "import textual"),
    ("lat_core/engine/x.py", "from rich.text import Text"),
    ("lat_core/engine/x.py", "import torch"),
    ("lat_core/config/x.py", "from transformers import AutoModel"),
    ("lat_core/engine/x.py", "from lat_core.train.loop import train"),
    ("lat_core/x.py", "import lat_tui.app"),
    ("lat_core/train/x.py", "import textual"),
    ("lat_core/train/x.py", "from lat_core.engine.loop import Engine"),
    ("lat_tui/x.py", "import torch"),
    ("lat_tui/x.py", "from lat_core.engine.loop import Engine"),
    ("lat_tui/screens/x.py", "from lat_core.config.job import JobConfig; from lat_core.train.loop import train"),
    ("lat_tui/x.py", "import sqlite3"),
    ("lat_tui/widgets/x.py", "from lat_core.contract.journal import Store"),
])
def test_layer_bans_fire(path, statement):
    assert banned(path, statement)


@pytest.mark.parametrize("path, statement", [
    ("lat_core/train/x.py", "import torch"),
    ("lat_core/train/x.py", "from peft import LoraConfig"),
    ("lat_tui/x.py", "from textual.app import App"),
    ("lat_core/engine/x.py", "from lat_core.triage import classify"),
    ("lat_tui/x.py", "from lat_core.front.client import Client"),
    ("tests/x.py", "import torch"),
])
def test_allowed_imports_pass(path, statement):
    assert not banned(path, statement)
