"""A state directory: its journal, its engine lock and which of its files are private.

Both the front ends (which create runs and start an engine) and the engine (which holds the lock and
opens the journal) use these; neither imports the other's side.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import TextIO

from lat_core.contract.journal import Store
from lat_core.contract.journal_faults import journal_faults
from lat_core.contract.run_secrets import SECRETS_NAME, create_private, secure_state_dir
from lat_core.errors import JournalError

JOURNAL_NAME = "journal.sqlite"
LOCK_NAME = "engine.lock"
PRIVATE_FILES = (JOURNAL_NAME, f"{JOURNAL_NAME}-wal", f"{JOURNAL_NAME}-shm", SECRETS_NAME, "engine.log")


def default_state_dir() -> Path:
    env = os.environ.get("LAT_STATE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "lat"


class EngineLock:
    """An exclusive flock on ``<state_dir>/engine.lock``: one engine per state directory."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / LOCK_NAME
        self._fh: TextIO | None = None

    def acquire(self, timeout: float = 1.0) -> bool:
        """Retries briefly: a front end's :meth:`is_held` probe holds the lock for an instant."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        deadline = time.time() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.time() >= deadline:
                    fh.close()
                    return False
                time.sleep(0.05)
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh
        return True

    def release(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None

    def is_held(self) -> bool:
        """True when another process (an engine) holds the lock."""
        if not self.path.exists():
            return False
        with open(self.path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False


def open_store(state_dir: Path) -> Store:
    """The state directory's journal; the directory private (0700) and its files 0600."""
    try:
        with journal_faults(Path(state_dir) / JOURNAL_NAME):
            secure_state_dir(Path(state_dir), PRIVATE_FILES)
            create_private(Path(state_dir) / JOURNAL_NAME)
        return Store(Path(state_dir) / JOURNAL_NAME)
    except JournalError:
        raise
    except OSError as exc:
        raise JournalError(f"cannot open state directory: {exc.strerror}", where=str(state_dir)) from exc
