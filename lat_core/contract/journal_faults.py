"""Journal and disk faults as one clear message each: what happened, where, and what to do.

SQLite and the file system report a full disk, a read-only directory, a lock held too long or a
damaged file as ``sqlite3.Error`` / ``OSError`` with terse texts; every front end and the engine
turn them into a :class:`JournalError` through :func:`explain`, print it and exit 2. The engine
also leaves the message in ``<state_dir>/engine.fault``, so the front end that started it can say
why it stopped instead of restarting it in a loop.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import sys
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lat_core.errors import JournalError, LatError

FAULT_NAME = "engine.fault"
TIMEOUT_ENV, DEFAULT_TIMEOUT_S = "LAT_JOURNAL_TIMEOUT_S", 30.0
SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_INDEX_HEADER, WAL_HEADER, WAL_FRAME_HEADER = 48, 32, 24  # SQLite's WAL file format
LOW_SPACE = 1 << 20  # less free than this: an I/O error on the journal is the disk being full

FULL = "the disk is full; free space on it (`df -h {dir}`) or use another --state-dir / output root"
READ_ONLY = ("it is read-only or not writable by this user; remount it writable, fix its permissions, "
             "or use another --state-dir (or $LAT_STATE_DIR)")
CORRUPT = ("the journal is damaged ({what}); move it aside (`mv {path} {path}.bad`, with its -wal and -shm "
           "files) to start a fresh journal: job folders and their results stay where they are")


def journal_timeout_s() -> float:
    """How long a journal call waits for another process's lock ($LAT_JOURNAL_TIMEOUT_S, default 30)."""
    try:
        return max(0.1, float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def explain(exc: BaseException, path: Path | str) -> LatError:
    """The fault behind ``exc`` (a LatError passes through) as a JournalError naming ``path``."""
    if isinstance(exc, LatError):
        return exc
    path, text = Path(path), str(exc).lower()
    code = getattr(exc, "errno", None) if isinstance(exc, OSError) else None
    if code in (errno.ENOSPC, errno.EDQUOT) or "disk is full" in text or "no space" in text:
        message = FULL.format(dir=path.parent if path.suffix else path)
    elif code in (errno.EROFS, errno.EACCES, errno.EPERM) or "readonly" in text or "read-only" in text:
        message = READ_ONLY
    elif "locked" in text or "busy" in text:
        message = (f"the journal has been locked by another process for more than {journal_timeout_s():g} s; "
                   f"find it with `fuser {path}` and end it, or retry later (${TIMEOUT_ENV} waits longer)")
    elif "not a database" in text or "malformed" in text or "truncated" in text:
        message = CORRUPT.format(what=str(exc), path=path)
    elif "disk i/o error" in text:
        message = _io_error(path)
    elif isinstance(exc, OSError) and code in (errno.ENOTDIR, errno.ENOENT, errno.EISDIR):
        message = f"cannot open journal: {exc.strerror} ({exc.filename}); use another --state-dir"
    elif "unable to open" in text and _read_only_dir(path):
        message = READ_ONLY  # SQLite could not create its -wal/-shm files beside the journal
    elif "unable to open" in text:
        message = "cannot open the journal; check that its directory exists and is writable, or use another --state-dir"
    else:
        message = f"journal or disk fault: {exc}"
    return JournalError(message, where=str(path))


def _read_only_dir(journal: Path) -> bool:
    folder = journal.parent if journal.suffix else journal
    return folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK)


def check_space(state_dir: Path) -> None:
    """Before starting an engine: on a full disk it would stop at its first write, and the next
    front end would start another (its fault record cannot be written there either)."""
    try:
        free = shutil.disk_usage(state_dir).free
    except OSError:
        return
    if free < LOW_SPACE:
        raise JournalError(FULL.format(dir=state_dir) + f" ({free} bytes free)", where=str(state_dir))


def _io_error(path: Path) -> str:
    """SQLite says 'disk I/O error' when it cannot create or grow its -wal/-shm files on a full disk."""
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    if free is not None and free < LOW_SPACE:
        return FULL.format(dir=path.parent)
    return ("I/O error on the journal or its -wal / -shm files; check the disk (`dmesg`) and that no one "
            "removed the -wal file while LAT ran (recent changes are then lost: move the journal aside)")


@contextmanager
def journal_faults(path: Path | str) -> Iterator[None]:
    """Raise a JournalError for any journal or disk fault inside the block."""
    try:
        yield
    except BrokenPipeError:
        raise  # the reader of stdout left (`lat-tui suites | head`): not the journal's fault
    except (sqlite3.Error, OSError) as exc:
        raise explain(exc, path) from exc


def check_journal_file(path: Path) -> None:
    """Before SQLite opens it: a file that is not a journal, or shorter than its header says
    (truncated), is refused; SQLite would otherwise fail later, or silently read a cut-off history."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return  # a new journal, created private before SQLite opened it
    with open(path, "rb") as fh:
        header = fh.read(100)
    if not header.startswith(SQLITE_MAGIC) or len(header) < 100:
        raise JournalError(CORRUPT.format(what="not an SQLite database", path=path), where=str(path))
    page_size = int.from_bytes(header[16:18], "big") or 65536
    pages = int.from_bytes(header[28:32], "big")
    size_valid = header[24:28] == header[92:96]  # SQLite trusts the header's size only then
    if size_valid and pages and size < pages * page_size:
        what = f"truncated: {size} bytes of {pages * page_size}"
        raise JournalError(CORRUPT.format(what=what, path=path), where=str(path))


def check_wal(path: Path) -> None:
    """The -shm index says the -wal holds frames, but the -wal is gone or shorter: someone removed
    it (or it was not copied along). SQLite then fails with 'disk I/O error' or reads stale state."""
    shm, wal = Path(f"{path}-shm"), Path(f"{path}-wal")
    try:
        with open(shm, "rb") as fh:
            header, copy = fh.read(WAL_INDEX_HEADER), fh.read(WAL_INDEX_HEADER)
    except OSError:
        return
    if len(copy) < WAL_INDEX_HEADER or header != copy or header[12] != 1:
        return  # mid-update (SQLite keeps two copies), or an index never built: nothing to judge
    page_size = int.from_bytes(header[14:16], sys.byteorder)
    page_size = 65536 if page_size == 1 else page_size
    frames = int.from_bytes(header[16:20], sys.byteorder)
    needed = WAL_HEADER + frames * (WAL_FRAME_HEADER + page_size) if frames else 0
    have = wal.stat().st_size if wal.exists() else 0
    if have < needed:
        raise JournalError(
            f"the journal's -wal file is missing or cut short ({have} of {needed} bytes): changes since the "
            f"last checkpoint are lost; end the engine (pid in {path.parent / 'engine.lock'}), move "
            f"{shm.name} aside and reopen, or move the journal aside to start afresh", where=str(path))


class WalLost(JournalError):
    """The -wal file this process writes was removed or replaced under it: another process would
    start a new one beside the frames only this process sees, and the two would damage the journal."""


class WalWatch:
    """The journal's -wal file as this connection found it, held open: before each write it must
    still be the file at that path. SQLite itself never removes it while a connection is open (the
    last one to close does), so a change is someone's ``rm``, or a copy put back. SQLite takes no
    lock on the -wal file, so this descriptor's close drops none of its locks."""

    def __init__(self, journal: Path):
        self.journal, self.path = journal, Path(f"{journal}-wal")
        try:
            self._fd: int | None = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # not made yet, or not ours to read: nothing to watch
            self._fd = None
        self.close = weakref.finalize(self, os.close, self._fd) if self._fd is not None else lambda: None

    def check(self) -> None:
        if self._fd is None:
            return
        held = os.fstat(self._fd)
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if held.st_nlink and now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return
        raise WalLost(f"its -wal file was {'replaced' if now is not None else 'removed'} while this process had "
                      "it open: writes stopped so the journal is not damaged (changes since its last checkpoint "
                      f"are lost); move {self.journal.name}-shm aside, then `lat-tui status` restarts the "
                      "engine, which settles jobs from their folders", where=str(self.journal))


def write_fault(state_dir: Path, message: str) -> None:
    """Best effort: on a full or read-only disk the engine.log line is all that may be left."""
    try:
        (Path(state_dir) / FAULT_NAME).write_text(message + "\n")
    except OSError:
        pass


def read_fault(state_dir: Path) -> str | None:
    try:
        return (Path(state_dir) / FAULT_NAME).read_text().strip() or None
    except OSError:
        return None


def clear_fault(state_dir: Path) -> None:
    try:
        (Path(state_dir) / FAULT_NAME).unlink()
    except FileNotFoundError:
        pass
