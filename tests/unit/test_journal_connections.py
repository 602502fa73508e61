"""Opening the journal again in one process must not disturb that process's other connections.

Closing any descriptor of a database file drops every POSIX lock the process holds on it, SQLite's
included; another process then took its own close for the last connection, checkpointed, deleted
the WAL, and this process's first connection read a frozen journal from then on (a test's store
never saw the engine's later writes)."""

import subprocess
import sys

from lat_core.front.service import open_store

WRITER = """
import sys
from lat_core.front.service import open_store
store = open_store(__import__("pathlib").Path(sys.argv[1]))
store.set_run_state(int(sys.argv[2]), sys.argv[3], "by another process")
store.close()
"""


def test_a_second_open_keeps_the_first_connection_reading_live(tmp_path):
    state = tmp_path / "state"
    first = open_store(state)
    run_id = first.create_run("plan: test", str(tmp_path), [], 0.0)
    for n, new_state in enumerate(("cancelling", "cancelled")):
        open_store(state).close()  # what each front end thread does
        subprocess.run([sys.executable, "-c", WRITER, str(state), str(run_id), new_state], check=True)
        assert first.run(run_id).state == new_state, f"write {n + 1} not seen"
