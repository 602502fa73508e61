"""A journal that loses its tail, for the engine's recovery tests: a copy taken now, put back later."""
import shutil
import sqlite3
from pathlib import Path


def snapshot_journal(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return Path(shutil.copy(path, f"{path}.before"))


def restore_journal(path: Path, copy: Path) -> None:
    """The journal loses everything after the copy: its WAL deleted, the file rolled back."""
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copy(copy, path)
