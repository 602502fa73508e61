"""lat_tui imports only the client and the types it returns: pyproject's "tui-allowlist" contract is a
real allow-list, and lat_tui/ruff.toml bans every other lat_core module, so a new module is covered.

The allow-list is read from pyproject.toml (one place); ruff is run as the editor runs it
(``--stdin-filename`` picks lat_tui/ruff.toml) and import-linter on a small tree shaped like ours."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "lat_core"
RUFF = shutil.which("ruff")
LINT_IMPORTS = shutil.which("lint-imports")
CONTRACT_ID = "tui-allowlist"


def allowlist_contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in config["contracts"] if c["id"] == CONTRACT_ID)


def allowed_modules() -> list[str]:
    """The lat_core modules lat_tui may import: the targets of the contract's ignored imports."""
    return [expression.split("->")[1].strip() for expression in allowlist_contract()["ignore_imports"]]


def core_modules() -> list[str]:
    """Every module of lat_core, from the files (importing lat_core.train would load torch)."""
    names = []
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def ruff_flagged(statements: list[str], path: str = "lat_tui/x.py") -> set[int]:
    """Line numbers (1-based) of ``statements`` that ruff's banned-api rule flags in ``path``."""
    out = subprocess.run([RUFF, "check", "--no-cache", "--select", "TID251", "--output-format", "json",
                          "--stdin-filename", path, "-"],
                         input="\n".join(statements) + "\n", text=True, capture_output=True, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr
    return {finding["location"]["row"] for finding in json.loads(out.stdout)}


def test_the_contract_forbids_all_of_the_core_and_allows_a_few_modules():
    contract = allowlist_contract()
    assert contract["type"] == "forbidden" and contract["source_modules"] == ["lat_tui"]
    assert "lat_core" in contract["forbidden_modules"] and "sqlite3" in contract["forbidden_modules"]
    assert "lat_core.front.client" in allowed_modules()
    for expression in contract["ignore_imports"]:
        assert re.fullmatch(r"lat_tui\.\*\* -> lat_core(\.\w+)+", expression), expression  # no wildcard target
    existing = set(core_modules())
    assert not [m for m in allowed_modules() if m not in existing]  # a misspelt entry allows nothing


@pytest.mark.skipif(RUFF is None, reason="ruff is installed with the test extras")
def test_every_other_core_module_is_banned_for_the_editor():
    """A module is allowed by the contract, or banned in lat_tui/ruff.toml; the packages that hold
    an allowed module (lat_core.front for the client) are left to import-linter, since ruff's ban
    of a package covers its modules."""
    allowed = allowed_modules()
    holders = {".".join(m.split(".")[:n]) for m in allowed for n in range(1, m.count(".") + 1)}
    others = [m for m in core_modules() if m not in allowed and m not in holders]
    assert len(others) > 60  # the walk really covers the core
    flagged = ruff_flagged([f"import {module}" for module in others])
    assert not [m for line, m in enumerate(others, 1) if line not in flagged]


@pytest.mark.skipif(RUFF is None, reason="ruff is installed with the test extras")
def test_allowed_modules_are_not_banned():
    assert not ruff_flagged([f"import {module}" for module in allowed_modules()])


def fake_tree(root: Path, tui_imports: list[str]) -> None:
    """lat_core with an allowed and a forbidden module (the client imports the latter, as ours
    does), and a lat_tui screen with ``tui_imports``."""
    files = {
        "lat_core/__init__.py": "", "lat_core/errors.py": "", "lat_core/front/__init__.py": "",
        "lat_core/front/client.py": "import lat_core.config.paths\nimport lat_core.contract.rows\n",
        "lat_core/config/__init__.py": "", "lat_core/config/paths.py": "",
        "lat_core/contract/__init__.py": "", "lat_core/contract/rows.py": "",
        "lat_core/contract/journal.py": "import sqlite3\n",
        "lat_tui/__init__.py": "", "lat_tui/screens/__init__.py": "",
        "lat_tui/screens/board.py": "".join(f"{line}\n" for line in tui_imports),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    contract = {k: v for k, v in allowlist_contract().items()}
    lines = ["[tool.importlinter]", 'root_packages = ["lat_core", "lat_tui"]', "include_external_packages = true",
             "[[tool.importlinter.contracts]]", *(f"{key} = {json.dumps(value)}" for key, value in contract.items())]
    (root / "pyproject.toml").write_text("\n".join(lines) + "\n")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT_IMPORTS, "--config", "pyproject.toml", "--contract", CONTRACT_ID, "--no-cache"],
                          cwd=root, capture_output=True, text=True, env={"PATH": str(Path(sys.executable).parent),
                                                                         "PYTHONPATH": str(root)})


@pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is installed with the test extras")
def test_the_contract_keeps_the_allowed_imports_and_breaks_on_any_other(tmp_path):
    allowed = ["from lat_core.front.client import Client", "from lat_core.contract.rows import RunRow",
               "from lat_core.errors import LatError"]
    fake_tree(tmp_path / "ok", allowed)
    kept = lint_imports(tmp_path / "ok")
    assert kept.returncode == 0, kept.stdout + kept.stderr

    fake_tree(tmp_path / "bad", [*allowed, "from lat_core.config.paths import x", "import sqlite3",
                                 "from lat_core.contract.journal import Store", "from lat_core import front"])
    broken = lint_imports(tmp_path / "bad")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    found = set(re.findall(r"lat_tui\.screens\.board -> (\S+) \(l\.\d+\)", broken.stdout))
    assert found == {"lat_core.config.paths", "sqlite3", "lat_core.contract.journal", "lat_core.front"}
