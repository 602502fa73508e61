"""A job folder's file names are spelled once, in lat_core.contract.jobdir.names: every other module of
the core and the front ends reaches them through that module or JobDir (or the client, for front
ends). A name spelled again elsewhere drifts the day one of the two changes."""

import ast
from pathlib import Path

import lat_core.contract.jobdir.names as names

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("lat_core", "lat_tui")
OWNER = ROOT / "lat_core" / "contract" / "jobdir"
# the names that can only mean a job folder's file (a word like "best" or "final" is also a column)
FILE_NAMES = {value for value in vars(names).values() if isinstance(value, str) and "." in value}
CHECKPOINT_PREFIX = "checkpoint-"


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def spelled_again(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    skip = docstrings(tree)
    shown = path.relative_to(ROOT) if ROOT in path.parents else path.name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in skip and node.value in FILE_NAMES:
            found.append(f"{shown}:{node.lineno}: {node.value!r}")
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                and node.values[0].value == CHECKPOINT_PREFIX:
            found.append(f"{shown}:{node.lineno}: f'{CHECKPOINT_PREFIX}...' (names.checkpoint_folder)")
    return found


def test_the_scan_knows_the_names_it_looks_for():
    assert {"job.yaml", "train.log", "events.jsonl", "env.json", "optimizer.pt", ".exit.json"} <= FILE_NAMES
    assert names.CHECKPOINT.match(names.checkpoint_folder(12)).group(1) == "12"


def test_no_module_spells_a_job_folder_file_name_again():
    files = [p for package in SCANNED for p in sorted((ROOT / package).rglob("*.py")) if OWNER not in p.parents]
    assert len(files) > 100
    assert [hit for path in files for hit in spelled_again(path)] == []


def test_the_scan_finds_a_name_spelled_again(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('"""A docstring may say train.log."""\nLOG = "train.log"\nSTEP = f"checkpoint-{3}"\n')
    hits = spelled_again(planted)
    assert [h.split(": ", 1)[1] for h in hits] == ["'train.log'", "f'checkpoint-...' (names.checkpoint_folder)"]
