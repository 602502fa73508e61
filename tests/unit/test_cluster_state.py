"""State safe on a cluster: the engine lock names its host, and a journal on a network filesystem
leaves WAL (whose shared memory one host alone can use)."""

import os
import time

import pytest

from lat_core.contract import filesystems
from lat_core.contract.journal import Store
from lat_core.contract.state_dir import STALE_AFTER_S, EngineLock, this_host
from lat_core.errors import JournalError


def mounts(tmp_path, *lines):
    path = tmp_path / "mounts"
    path.write_text("".join(f"{line} 0 0\n" for line in lines))
    return path


def test_the_filesystem_is_the_deepest_mount(tmp_path):
    table = mounts(tmp_path, "overlay / overlay rw", "srv:/home /home nfs4 rw,vers=4.2",
                   "tmpfs /home/me/local\\040disk tmpfs rw")
    assert filesystems.filesystem_of(tmp_path, table) == "overlay"
    assert filesystems.network_filesystem(tmp_path / "/home/me/state", table) == "nfs4"
    assert filesystems.network_filesystem(tmp_path / "/home/me/local disk/state", table) is None
    assert filesystems.journal_mode(tmp_path / "/home/me/state/journal.sqlite", table) == "DELETE"
    assert filesystems.journal_mode(tmp_path / "/tmp/journal.sqlite", table) == "WAL"
    assert filesystems.filesystem_of(tmp_path, tmp_path / "missing") is None


def test_a_journal_on_nfs_uses_the_rollback_journal(tmp_path, monkeypatch):
    monkeypatch.setattr(filesystems, "MOUNTS", mounts(tmp_path, f"srv:/x {tmp_path / 'nfs'} nfs rw"))
    store = Store(tmp_path / "nfs" / "state" / "journal.sqlite")
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    store.create_run("plan: x", str(tmp_path), [], 0.0)
    assert not (tmp_path / "nfs" / "state" / "journal.sqlite-wal").exists()
    local = Store(tmp_path / "local" / "journal.sqlite")
    assert local._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_lock_names_host_and_pid_and_is_emptied_on_release(tmp_path):
    lock = EngineLock(tmp_path)
    assert lock.acquire()
    holder = lock.holder()
    assert (holder.host, holder.pid) == (this_host(), os.getpid())
    assert (tmp_path / "engine.lock").read_text() == f"{this_host()}:{os.getpid()}"
    lock.release()
    assert lock.holder() is None and not lock.is_held()


def test_a_fresh_lock_of_another_host_is_refused_a_stale_one_taken_over(tmp_path):
    path = tmp_path / "engine.lock"
    path.write_text("login2.cluster:4242")  # its flock did not reach this host (NFS without lock manager)
    lock = EngineLock(tmp_path)
    assert lock.is_held()
    with pytest.raises(JournalError) as err:
        lock.acquire()
    assert "engine login2.cluster:4242 of another host" in str(err.value)
    old = time.time() - STALE_AFTER_S - 1
    os.utime(path, (old, old))  # its heartbeat stopped: that engine is gone
    assert not lock.is_held() and lock.acquire()
    assert lock.holder().host == this_host()
    lock.release()
    path.write_text("4242")  # an engine from before hosts were recorded: this host's, the flock decides
    assert not lock.is_held() and lock.acquire()
    lock.release()
