"""Files in job folders, created, appended, replaced and deleted without following a symlink.

On a shared server an output root may be writable by other users (a group's scratch folder). Any of
them can plant a symlink where LAT is about to write (``train.log`` -> someone's file, a job folder
-> ``/etc``), or a folder of their own; a path-based ``open`` or ``shutil.rmtree`` follows it and
writes or deletes outside the root with LAT's rights, root's included. So every write LAT makes in
a job folder goes through here:

- a job folder is ``<output root>/<group>/<job>`` (:mod:`lat_core.front.jobs`), its runner's files in
  ``<job>/.lat``; the folders below the output root are opened one at a time relative to the one
  above (``openat``) with O_NOFOLLOW, and each must be a real folder owned by us (or root);
- a file is opened with O_NOFOLLOW relative to its folder, replaced by a rename inside it (which
  replaces a planted symlink, never its target), and a file appended to must be a regular file of ours;
- ``--overwrite`` deletes, relative to the real job folder, only the outputs the trainer writes.

The output root itself is the user's choice (it may be a symlink they made): :func:`prepare_output_root`
refuses a system folder and one owned by someone else, as :func:`check_state_dir` does for the state
directory, whose journal tells the engine what to run.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat
from pathlib import Path

from lat_core.errors import OutputPathError

JOB_DEPTH = 2  # <output root>/<data>_seed<seed>/<config>: the folders checked below an output root
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted as a log would block the opening engine forever; it fails instead
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# never an output root: the system's own trees (and anything in them), and these folders themselves
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/dev", "/proc", "/sys")
SYSTEM_FOLDERS = ("/", "/var", "/home", "/root", "/tmp")


class UnsafePathError(OutputPathError):
    """A path LAT will not write through: a symlink, or a folder another user owns."""

    title = "Unsafe path"


# ------------------------------------------------------------------------------ owners
def owner_name(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _is_trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def _refuse_owner(uid: int, where: Path, fix: str) -> UnsafePathError:
    you = owner_name(os.geteuid()).split(" (")[0]
    return UnsafePathError(f"owned by {owner_name(uid)}, not by you ({you}): whoever owns "
                           f"it decides what is in it; {fix}", where=str(where))


# ------------------------------------------------------------------------------ folders
def job_folder_of(path: Path) -> Path:
    """The job folder of one of its files: ``<job>/<name>`` or ``<job>/.lat/<name>``."""
    from lat_core.contract.jobdir.names import RUNNER_DIR  # the job folder writes through this module

    folder = Path(os.path.abspath(path)).parent
    return folder.parent if folder.name == RUNNER_DIR else folder


def open_folder(folder: Path, job_dir: Path, *, create: bool) -> int:
    """A descriptor of ``folder`` (the job folder or one inside it) reached from the output root
    without following a symlink; each folder below the root must be ours (or root's). ``create``
    makes missing folders, the output root included. The caller closes it."""
    job_dir, folder = Path(os.path.abspath(job_dir)), Path(os.path.abspath(folder))
    if folder != job_dir and job_dir not in folder.parents:
        raise UnsafePathError(f"not inside the job folder {job_dir}", where=str(folder))
    cut = max(1, len(job_dir.parts) - JOB_DEPTH)
    anchor = Path(*job_dir.parts[:cut])
    if create:
        anchor.mkdir(parents=True, exist_ok=True)
    fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for name in job_dir.parts[cut:] + folder.relative_to(job_dir).parts:
        anchor = anchor / name
        fd = _step_down(fd, name, anchor, create)
    return fd


def _step_down(parent: int, name: str, where: Path, create: bool) -> int:
    """``name`` in ``parent`` (closed here), opened as a real folder of ours."""
    try:
        if create:
            try:
                os.mkdir(name, 0o777, dir_fd=parent)
            except FileExistsError:
                pass
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _symlink_refusal(parent, name, where) or exc from None
            raise
    finally:
        os.close(parent)
    _check_own(fd, where, "remove it, or choose an output root of your own")
    return fd


def _symlink_refusal(folder: int, name: str, where: Path) -> UnsafePathError | None:
    """The refusal of ``name`` when it is a symlink; None when it is something else (a file where a
    folder should be: the caller's own error says so)."""
    try:
        target = os.readlink(name, dir_fd=folder)
    except OSError:
        return None
    return UnsafePathError(f"is a symlink (to {target}); LAT never writes through one in a job folder: another "
                           "user of a shared output root may have planted it. Remove it and start again",
                           where=str(where))


def _check_own(fd: int, where: Path, fix: str) -> os.stat_result:
    st = os.fstat(fd)
    if not _is_trusted(st.st_uid):
        os.close(fd)
        raise _refuse_owner(st.st_uid, where, fix)
    return st


def ensure_folder(folder: Path, job_dir: Path | None = None) -> None:
    """Make ``folder`` (a job folder or one inside it, e.g. ``.lat``) as :func:`open_folder` walks."""
    os.close(open_folder(folder, job_dir or folder, create=True))


# ------------------------------------------------------------------------------ files
def replace_file(path: Path, data: bytes, *, durable: bool = False, job_dir: Path | None = None) -> None:
    """``path`` replaced whole by ``data`` (written beside it, then renamed): a reader never sees half
    of it. ``durable``: on disk before the rename (an exit record must survive a crash)."""
    path = Path(path)
    folder = open_folder(path.parent, job_dir or job_folder_of(path), create=True)
    try:
        _replace_in(folder, path.name, data, durable)
    except OSError as exc:   # its names are relative to the folder: the user is told the whole path
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    finally:
        os.close(folder)


def write_files(folder: Path, files: dict[str, bytes], *, job_dir: Path | None = None) -> None:
    """Each of ``files`` (name -> content) in ``folder``: a new one written in place (cheap: a plan
    may make 10,000 job folders), an existing one (a reused job folder, read meanwhile) replaced whole."""
    fd = open_folder(folder, job_dir or folder, create=True)
    try:
        for name, data in files.items():
            try:
                _write_new(fd, name, data, durable=False, retry=False)
            except FileExistsError:
                _replace_in(fd, name, data, durable=False)
    finally:
        os.close(fd)


def _replace_in(folder: int, name: str, data: bytes, durable: bool) -> None:
    tmp = f".{name}.tmp"
    _write_new(folder, tmp, data, durable, retry=True)
    os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)


def _write_new(folder: int, name: str, data: bytes, durable: bool, retry: bool) -> None:
    """Create ``name`` (never there before: O_EXCL) and write it; ``retry`` removes a leftover first."""
    try:
        fd = os.open(name, _NEW_FLAGS, 0o666, dir_fd=folder)
    except FileExistsError:
        if not retry:
            raise
        os.unlink(name, dir_fd=folder)  # a leftover of a crash, or a planted link: the link goes, not its target
        fd = os.open(name, _NEW_FLAGS, 0o666, dir_fd=folder)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())


def open_append(path: Path, *, job_dir: Path | None = None) -> int:
    """A descriptor appending to ``path`` (made if missing), which must be a regular file of ours:
    never a symlink, a FIFO or someone else's file. The caller closes it."""
    path = Path(path)
    folder = open_folder(path.parent, job_dir or job_folder_of(path), create=False)
    try:
        try:
            fd = os.open(path.name, _APPEND_FLAGS, 0o666, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO (or socket) nobody reads
                raise UnsafePathError("is not a regular file", where=str(path)) from None
            if exc.errno == errno.ELOOP:
                raise _symlink_refusal(folder, path.name, path) or exc from None
            raise
    finally:
        os.close(folder)
    st = _check_own(fd, path, "remove it and start again")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePathError("is not a regular file", where=str(path))
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def remove_files(folder: Path, names: tuple[str, ...], *, job_dir: Path | None = None) -> None:
    """Delete ``names`` from ``folder`` where they exist (a link itself, never what it points to)."""
    try:
        fd = open_folder(folder, job_dir or job_folder_of(Path(folder) / "-"), create=False)
    except FileNotFoundError:
        return
    try:
        for name in names:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
    finally:
        os.close(fd)


def remove_outputs(job_dir: Path, names: tuple[str, ...], pattern: re.Pattern[str]) -> list[str]:
    """Delete the entries of ``job_dir`` named in ``names`` or matching ``pattern`` (the outputs the
    trainer writes), inside the real folder only: a symlink among them is removed, never followed,
    and a job folder that is a symlink is refused. Returns the names deleted."""
    try:
        folder = open_folder(job_dir, job_dir, create=False)
    except FileNotFoundError:
        return []
    removed = []
    try:
        for name in sorted(os.listdir(folder)):
            if name in names or pattern.fullmatch(name):
                _remove(folder, name)
                removed.append(name)
    finally:
        os.close(folder)
    return removed


def _remove(folder: int, name: str) -> None:
    if stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
        shutil.rmtree(name, dir_fd=folder)  # fd-based: never leaves the folder through a link
    else:
        os.unlink(name, dir_fd=folder)


# ------------------------------------------------------------------------------ roots
def check_output_root(root: Path) -> Path:
    """The output root, expanded; UnsafePathError for a system folder, your home folder itself or a
    root another user owns. Writes nothing."""
    root = Path(root).expanduser()
    _refuse_system_folder(root)
    try:
        owner = root.stat().st_uid
    except OSError:
        return root  # missing: LAT makes it, so yours (or cannot, and says why)
    if owner != os.geteuid():
        raise _refuse_owner(owner, root, "make a folder of your own for outputs (e.g. mkdir <root>/$USER) and "
                                         "name that as output_root / --output-root")
    return root


def prepare_output_root(root: Path) -> Path:
    """:func:`check_output_root`, then the root made if missing; OutputPathError when it cannot be
    made or written."""
    root = check_output_root(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputPathError(f"cannot create output root: {exc.strerror}", where=str(root)) from exc
    check_output_root(root)  # made meanwhile by someone else?
    if not os.access(root, os.W_OK):
        raise OutputPathError("output root is not writable", where=str(root))
    return root


def _refuse_system_folder(root: Path) -> None:
    home = os.path.realpath(Path.home())
    for path in {os.path.abspath(root), os.path.realpath(root)}:
        if path in SYSTEM_FOLDERS or path == home or any(path == t or path.startswith(t + "/") for t in SYSTEM_TREES):
            what = "your home folder itself" if path == home else "a system folder"
            raise UnsafePathError(f"output root {path} is {what}: job folders and --overwrite would mix LAT's "
                                  "outputs with its files; name a folder of its own (e.g. ~/lat-runs)", where=str(root))


def check_state_dir(state_dir: Path) -> None:
    """Refuse a state directory another user owns, or one holding another user's file: its journal
    says what the engine runs, and as whom (yours). A missing one is fine: it will be made yours."""
    state_dir = Path(state_dir)
    try:
        owner = state_dir.stat().st_uid
    except FileNotFoundError:
        return
    fix = "use a state directory of your own (--state-dir or $LAT_STATE_DIR; the default is ~/.local/state/lat)"
    if owner != os.geteuid():
        raise _refuse_owner(owner, state_dir, fix)
    for entry in os.scandir(state_dir):
        uid = entry.stat(follow_symlinks=False).st_uid
        if uid != os.geteuid():
            raise _refuse_owner(uid, Path(entry.path), f"the state directory holds a file you did not make; {fix}")


def escape_problem(field: str, value: object, label: str | None = None) -> str | None:
    """Why a config's ``name`` or ``output_dir`` would point out of a job's folder (an absolute path,
    ``..``, ``~``), None when it does not. ``label``: the field as the user wrote it."""
    if not isinstance(value, str):
        return None
    parts, label = Path(value).parts, label or field
    if field == "name" and (len(parts) != 1 or value in (".", "..") or "\\" in value):
        return f"field '{label}': {value!r} is a path; a job's name is one plain name (its folder is made from it)"
    if field == "output_dir" and (value.startswith(("/", "~")) or ".." in parts):
        return (f"field '{label}': {value!r} leaves the output root; each job's folder is "
                "<output root>/<data>_seed<seed>/<config>: drop output_dir and set the plan's output_root")
    return None

