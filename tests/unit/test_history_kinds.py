"""History entries that are not states are kinds of one Enum: each is written and read back as
itself, a string that is no kind is refused, and every writer in lat_core names a kind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lat_core.contract.commands import PauseRun
from lat_core.contract.journal import Store
from lat_core.contract.states import HistoryKind, JobState, RunState, history_entry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def journal(tmp_path):
    store = Store(tmp_path / "journal.sqlite")
    yield store, store.create_run("plan: test", str(tmp_path), [], 0.0)
    store.close()


def test_every_kind_is_written_and_read_back_as_itself(journal):
    store, run_id = journal
    for kind in HistoryKind:
        store.add_transition(run_id, None, kind, f"a {kind.name}")
    entries = [t for t in store.transitions(run_id) if t.detail.startswith("a ")]
    assert [(HistoryKind(t.new_state), t.old_state, t.detail) for t in entries] == [
        (kind, None, f"a {kind.name}") for kind in HistoryKind]


def test_kinds_are_not_states():
    states = {s.value for s in JobState} | {s.value for s in RunState}
    assert states.isdisjoint(k.value for k in HistoryKind)


def test_a_notice_and_a_command_say_what_they_are_about(journal):
    store, run_id = journal
    store.add_transition(run_id, None, HistoryKind.NOTICE, "LAT run 1 started", about="start")
    command = store.add_command(run_id, PauseRun())
    store.finish_command(command, "done", "admission paused")
    assert [t.new_state for t in store.transitions(run_id)][-2:] == ["notice:start", "command:pause"]
    assert history_entry(HistoryKind.NOTICE, "oom") == "notice:oom" and history_entry(HistoryKind.MPS) == "mps"


def test_the_engine_error_and_pause_readers_use_their_kinds(journal):
    store, run_id = journal
    store.add_transition(run_id, None, HistoryKind.ENGINE_ERROR, "ValueError: x (retrying with backoff)")
    assert store.engine_error(run_id) == "ValueError: x (retrying with backoff)"
    store.add_transition(run_id, None, HistoryKind.ENGINE_RECOVERED, "the run is served again")
    assert store.engine_error(run_id) is None
    store.set_paused(run_id, True, "disk full at /data: free space, then `lat-tui resume`")
    assert store.pause_reason(run_id) == "disk full at /data: free space, then `lat-tui resume`"


def test_a_string_that_is_no_kind_is_refused_and_nothing_is_written(journal):
    store, run_id = journal
    before = len(store.transitions(run_id))
    with pytest.raises(ValueError, match="'note' is not a valid HistoryKind"):
        store.add_transition(run_id, None, "note", "free text")  # type: ignore[arg-type]
    assert len(store.transitions(run_id)) == before


def test_every_history_writer_in_lat_core_names_a_kind():
    loose, writers = [], 0
    for path in sorted((ROOT / "lat_core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_transition":
                writers += 1
                kind = node.args[2] if len(node.args) > 2 else None
                if not (isinstance(kind, ast.Attribute) and getattr(kind.value, "id", None) == "HistoryKind"):
                    loose.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert loose == [] and writers >= 15  # the engine's writers were all found
