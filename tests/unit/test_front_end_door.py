"""Front ends reach the core through lat_core.front.client only: no SQLite, no Store, no private names."""

import ast
from pathlib import Path

import pytest

from lat_core.contract.commands import SetSlots
from lat_core.front.client import Client, CommandRow, NoRunError

TUI = Path(__file__).resolve().parents[2] / "lat_tui"
FORBIDDEN = ("sqlite3", "lat_core.contract.journal")


def imports(path: Path):
    """(module, names) for every import in the file, at any depth (lazy imports included)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [a.name for a in node.names]


def test_lat_tui_never_opens_the_journal_itself():
    files = sorted(TUI.rglob("*.py"))
    assert len(files) > 20  # the scan really covers the package
    bad = [f"{p.relative_to(TUI)}: {module}" for p in files for module, _ in imports(p)
           if any(module == f or module.startswith(f + ".") for f in FORBIDDEN)]
    assert not bad, bad


def test_lat_tui_imports_no_private_core_names():
    bad = [f"{p.relative_to(TUI)}: {module}.{name}" for p in sorted(TUI.rglob("*.py"))
           for module, names in imports(p) if module.startswith("lat_core")
           for name in names if name.startswith("_") and not name.startswith("__")]
    assert not bad, bad


def test_client_reads_commands_back_typed(tmp_path):
    client = Client(tmp_path / "state")
    with pytest.raises(NoRunError, match="no run yet"):
        client.resolve_run()
    from lat_core.front.service import open_store

    store = open_store(tmp_path / "state")
    run_id = store.create_run("plan: x\nenv: {HP_LR: '0.1'}\n", str(tmp_path), [{"id": "cpu", "slots": 1, "env": {}}], 0)
    run = client.resolve_run()
    command_id = client.send(run, SetSlots("cpu", 2), start_engine=False)
    assert client.command(command_id) == CommandRow(
        id=command_id, run_id=run_id, command=SetSlots("cpu", 2), status="pending", result="",
        ts=client.command(command_id).ts, handled=None)
    assert client.command(command_id).kind == SetSlots.kind and client.command(command_id).job_id is None
    store.finish_command(command_id, "done", "cpu: 1 -> 2 slots")
    answer = client.wait_answer(command_id, timeout=1)
    assert answer.answered and answer.status == "done" and answer.result == "cpu: 1 -> 2 slots"
