"""Which filesystem a state directory lies on: SQLite's WAL mode keeps its index in shared memory
(the -shm file, mmap'ed), which processes on two hosts of a network filesystem cannot share, so a
journal there uses the rollback journal (``DELETE``), which needs only file locks.
"""

from __future__ import annotations

import os
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")
# filesystems whose files other hosts may open at the same time
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "ceph", "lustre", "gpfs", "beegfs",
                        "glusterfs", "fuse.glusterfs", "fuse.sshfs", "fuse.cephfs", "9p", "panfs", "wekafs"})


def filesystem_of(path: Path, mounts: Path | None = None) -> str | None:
    """The type of the filesystem ``path`` (or its nearest existing parent) is mounted on; None
    where the mount table cannot be read."""
    target = Path(os.path.realpath(path))
    try:
        lines = (mounts or MOUNTS).read_text().splitlines()
    except OSError:
        return None
    best, fstype = -1, None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(_unescape(fields[1]))
        if (target == point or point in target.parents) and len(point.parts) >= best:  # the later mount on top
            best, fstype = len(point.parts), fields[2]
    return fstype


def network_filesystem(path: Path, mounts: Path | None = None) -> str | None:
    """The network filesystem's type when ``path`` lies on one, else None."""
    fstype = filesystem_of(path, mounts)
    return fstype if fstype in NETWORK_FS else None


def _unescape(field: str) -> str:
    """The mount table writes a space in a path as ``\\040`` (and tab, newline, backslash alike)."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def journal_mode(journal: Path, mounts: Path | None = None) -> str:
    """``WAL`` (readers never wait for the writer) on a local disk, ``DELETE`` on a network one."""
    return "DELETE" if network_filesystem(journal.parent, mounts) else "WAL"
