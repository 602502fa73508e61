"""A state directory: its journal, its engine lock and which of its files are private.

Both the front ends (which create runs and start an engine) and the engine (which holds the lock and
opens the journal) use these; neither imports the other's side.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import time
from dataclasses import dataclass
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


HEARTBEAT_S = 10.0  # the engine touches its lock file this often while it holds it
STALE_AFTER_S = 120.0  # a lock of another host untouched this long: its engine is gone (NFS caches attributes ~60 s)


class EngineElsewhere(JournalError):
    """An engine of another host serves the state directory: this one must not start."""

    title = "Engine on another host"


def this_host() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class LockHolder:
    """What the lock file says: the engine's host and pid, and its last heartbeat (the file's mtime)."""
    host: str
    pid: int
    seen: float

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"

    @classmethod
    def parse(cls, text: str, seen: float) -> LockHolder | None:
        """``host:pid``; a bare ``pid`` (an engine from before hosts were recorded) is this host's."""
        host, _, pid = text.strip().rpartition(":")
        if not pid.isdigit():
            return None
        return cls(host or this_host(), int(pid), seen)

    def alive_elsewhere(self, now: float) -> bool:
        """An engine of another host whose heartbeat is recent: its pid cannot be checked from here."""
        return self.host != this_host() and now - self.seen < STALE_AFTER_S


class EngineLock:
    """An exclusive flock on ``<state_dir>/engine.lock``: one engine per state directory. The file
    names the holder as ``host:pid`` and its mtime is the holder's heartbeat, so that an engine on
    another host (two login nodes sharing a state directory on NFS, where flock may not reach
    across hosts) is refused too."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / LOCK_NAME
        self._fh: TextIO | None = None
        self._beating = threading.Event()

    def acquire(self, timeout: float = 1.0) -> bool:
        """Retries briefly: a front end's :meth:`is_held` probe holds the lock for an instant.
        EngineElsewhere when an engine of another host holds it (see :class:`LockHolder`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.check_not_elsewhere()
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
        fh.write(f"{this_host()}:{os.getpid()}")
        fh.flush()
        self._fh = fh
        return True

    def holder(self) -> LockHolder | None:
        """Who the lock file names, None when nobody (or it is unreadable)."""
        try:
            with open(self.path) as fh:
                return LockHolder.parse(fh.read(200), os.fstat(fh.fileno()).st_mtime)
        except OSError:
            return None

    def check_not_elsewhere(self) -> None:
        """EngineElsewhere when the file names an engine of another host with a recent heartbeat:
        from here its pid cannot be checked, and its flock may not reach this host."""
        holder = self.holder()
        if holder is not None and holder.alive_elsewhere(time.time()):
            raise EngineElsewhere(
                f"the engine {holder} of another host serves this state directory (heartbeat "
                f"{time.time() - holder.seen:.0f} s ago); run lat-tui on {holder.host}, or give each host its "
                f"own --state-dir. If that engine is gone, its lock is taken over {STALE_AFTER_S:.0f} s after "
                f"its last heartbeat", where=str(self.path))

    def keep_fresh(self) -> None:
        """Touch the lock file every HEARTBEAT_S while it is held (a daemon thread), so that other
        hosts see this engine alive however long one of its ticks takes."""
        if self._beating.is_set():
            return
        self._beating.set()
        threading.Thread(target=self._beat, name="engine-lock-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        while self._beating.is_set():
            fh = self._fh
            if fh is not None:
                try:
                    os.utime(fh.fileno())
                except OSError:
                    pass  # a full or read-only disk: the journal's own writes report it
            time.sleep(HEARTBEAT_S)

    def release(self) -> None:
        """The file emptied while still locked: no host waits for a heartbeat that stopped on purpose."""
        if self._fh:
            try:
                self._fh.seek(0)
                self._fh.truncate()
            except OSError:
                pass  # a full or read-only disk: the flock still goes with the close
            self._fh.close()
            self._fh = None

    def is_held(self) -> bool:
        """True when another process (an engine, here or on another host) holds the lock."""
        if not self.path.exists():
            return False
        holder = self.holder()
        if holder is not None and holder.alive_elsewhere(time.time()):
            return True
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
