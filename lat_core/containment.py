"""A job is its whole process tree: how the runner contains it, and how anyone stops all of it.

A trainer's children may leave its process group and session (``setsid``), and a runner may be
killed before its trainer; a process left over holds GPU memory that the next job in the slot needs.
So every job's tree is contained, one of two ways, chosen by the runner when it starts:

- ``cgroup``: the trainer runs in a cgroup v2 of its own, a child of the runner's cgroup (so every
  limit the runner is under still applies); every process of the job, ``setsid`` or not, stays in it,
  and one write to ``cgroup.kill`` stops them all. Needs a writable cgroup2 hierarchy.
- ``subreaper``: the runner is the child subreaper of its tree (orphaned descendants become its
  children, so it still sees them), and every process the job execs carries ``LAT_JOB_TREE=<token>``
  in its environment, which finds the tree again once the runner itself is gone.

``LAT_CONTAINMENT=cgroup|subreaper|auto`` (default ``auto``: cgroup where possible) forces one.
The runner stops what is left of its tree when the trainer ends; the engine does the same, from the
record in the runner's pid file, when the runner vanished (see :func:`stop_tree`).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from lat_core.contract.jobdir import OomKills
from lat_core.process_start import same_start

TOKEN_VAR = "LAT_JOB_TREE"
MODE_VAR = "LAT_CONTAINMENT"
MODES = ("auto", "cgroup", "subreaper")
PR_SET_CHILD_SUBREAPER = 36
TERM_GRACE_S = 3.0  # leftovers get SIGTERM first: a data loader or logger may want to flush
GONE_WAIT_S = 5.0


class ContainmentError(RuntimeError):
    """A forced containment (``LAT_CONTAINMENT=cgroup``) that this machine does not allow."""


@dataclass(frozen=True)
class Containment:
    """How one attempt's processes are held together; written into the runner's pid file and exit
    record (``to_json``) and read back by the engine (``from_json``)."""

    kind: str  # "cgroup" or "subreaper"
    token: str
    cgroup: str | None = None  # the job's cgroup folder (kind "cgroup")
    why: str = ""  # why this kind: forced, or why cgroup was not possible

    def to_json(self) -> dict:
        return {"kind": self.kind, "token": self.token, "cgroup": self.cgroup, "why": self.why}

    @classmethod
    def from_json(cls, data) -> Containment | None:
        if not isinstance(data, dict) or data.get("kind") not in ("cgroup", "subreaper"):
            return None
        cgroup = data.get("cgroup")
        return cls(str(data["kind"]), str(data.get("token") or ""), str(cgroup) if cgroup else None,
                   str(data.get("why") or ""))

    def cgroup_dir(self) -> Path | None:
        """The job's cgroup folder, or None where the job is not in a cgroup of its own (a record that
        says cgroup but names no folder, damaged or hand-written, holds nothing to look in)."""
        return Path(self.cgroup) if self.kind == "cgroup" and self.cgroup else None

    def describe(self) -> str:
        """For the attempt's log header."""
        if self.kind == "cgroup":
            return f"cgroup {self.cgroup} (all the job's processes are stopped when it ends)"
        return (f"subreaper + process sweep (all the job's processes are stopped when it ends"
                f"{'; ' + self.why if self.why else ''})")

    def child_env(self) -> dict[str, str]:
        return {TOKEN_VAR: self.token}


# ---------------------------------------------------------------- choosing (the runner, at start)
def contain(tag: str, mode: str | None = None) -> Containment:
    """Set up containment for the tree the calling runner is about to start."""
    mode = (mode or os.environ.get(MODE_VAR) or "auto").strip().lower()
    if mode not in MODES:
        raise ContainmentError(f"{MODE_VAR}={mode!r}: expected one of {', '.join(MODES)}")
    token = os.urandom(16).hex()
    why = f"forced by {MODE_VAR}=subreaper"
    if mode != "subreaper":
        try:
            return Containment("cgroup", token, str(_make_job_cgroup(f"lat-{tag}-{token[:8]}")))
        except OSError as exc:
            if mode == "cgroup":
                raise ContainmentError(f"{MODE_VAR}=cgroup, but no cgroup can be made here: {exc}") from exc
            why = f"no cgroup: {exc}"
    become_subreaper()
    return Containment("subreaper", token, None, why)


def become_subreaper() -> None:
    import ctypes  # only here: the cgroup path needs no C calls

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def cgroup2_mount(mounts: Path = Path("/proc/self/mounts")) -> Path | None:
    for line in mounts.read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def _own_cgroup2_folder() -> Path:
    mount = cgroup2_mount()
    if mount is None:
        raise OSError("no cgroup2 hierarchy is mounted")
    line = next((ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::")), None)
    if line is None:
        raise OSError("this process is in no cgroup2 group")
    folder = mount / line[3:].strip().lstrip("/")
    # inside a cgroup namespace the mount root is our group while /proc may show another path
    return folder if folder.is_dir() else mount


def _make_job_cgroup(name: str) -> Path:
    """A child of our own group; moving ourselves in and back proves we may move the trainer in."""
    parent = _own_cgroup2_folder()
    folder = parent / name
    folder.mkdir()
    try:
        (folder / "cgroup.procs").write_text(str(os.getpid()))
        (parent / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        _rmdir(folder)
        raise
    return folder


def enter(containment: Containment) -> None:
    """In the trainer, before it runs anything: join the job's cgroup (the token travels in the
    environment, :meth:`Containment.child_env`)."""
    if (folder := containment.cgroup_dir()) is not None:
        (folder / "cgroup.procs").write_text(str(os.getpid()))


# ---------------------------------------------------------------- finding and stopping a tree
def members(containment: Containment | None, runner_pid: int, runner_start: float | None = None) -> list[psutil.Process]:
    """The live processes of the job's tree, the runner itself left out."""
    found: dict[int, psutil.Process] = {}
    folder = containment.cgroup_dir() if containment is not None else None
    if folder is not None:
        for pid in _cgroup_pids(folder):
            _add(found, pid)
    else:
        for proc in _descendants(runner_pid, runner_start) + _same_session(runner_pid, runner_start):
            found.setdefault(proc.pid, proc)
        if containment is not None and containment.token:
            for proc in _carrying(containment.token):
                found.setdefault(proc.pid, proc)
    found.pop(runner_pid, None)
    found.pop(os.getpid(), None)
    return [p for p in found.values() if _alive(p)]


def stop_tree(containment: Containment | None, runner_pid: int, runner_start: float | None = None,
              grace_s: float = 0.0) -> int:
    """Stop every process of the job's tree (SIGTERM and ``grace_s`` first, when given), wait until
    they are gone (or SIGKILLed and ``GONE_WAIT_S`` passed); how many there were."""
    left = members(containment, runner_pid, runner_start)
    if not left:
        return 0
    reap = runner_pid == os.getpid()  # the runner reaps orphans it adopted; the engine reaps nothing here
    if grace_s > 0:
        _signal_all(left, signal.SIGTERM)
        _wait_gone(containment, runner_pid, runner_start, grace_s, reap)
    deadline = time.monotonic() + GONE_WAIT_S
    while (alive := members(containment, runner_pid, runner_start)) and time.monotonic() < deadline:
        _kill(containment, alive)
        _wait_gone(containment, runner_pid, runner_start, 0.05, reap)
    if reap:
        _reap_children()
    return len(left)


def job_oom_kills(containment: Containment | None) -> OomKills | None:
    """OOM kills inside the job's own cgroup (made for it, so counted from 0), for the exit record
    (read by :func:`lat_core.triage.hostoom.oom_kill_readings`); None where
    the group has no memory controller. Read here, not through ``lat_core.triage``, which would
    cost every job's end the import of the whole triage package."""
    if containment is None or containment.cgroup is None:
        return None
    events = Path(containment.cgroup, "memory.events")
    try:
        counts = dict(line.split(" ", 1) for line in events.read_text().splitlines() if " " in line)
        return OomKills(f"cgroup2:{events}", int(counts["oom_kill"]))
    except (OSError, KeyError, ValueError):
        return None


def release(containment: Containment | None) -> None:
    """Remove the job's (empty) cgroup."""
    if containment is not None and (folder := containment.cgroup_dir()) is not None:
        _rmdir(folder)


def _kill(containment: Containment | None, alive: list[psutil.Process]) -> None:
    kill_file = Path(containment.cgroup, "cgroup.kill") if containment and containment.cgroup else None
    if kill_file is not None and kill_file.exists():
        try:
            kill_file.write_text("1")  # the kernel kills every member, even one forking right now
            return
        except OSError:
            pass  # removed or not ours: kill them one by one
    _signal_all(alive, signal.SIGKILL)


def _wait_gone(containment, runner_pid, runner_start, timeout_s: float, reap: bool) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reap:
            _reap_children()
        if not members(containment, runner_pid, runner_start):
            return
        time.sleep(0.05)


def _signal_all(procs: list[psutil.Process], signum: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(signum)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def _reap_children() -> None:
    """Collect the runner's exited children (orphans it adopted as subreaper), so none stays a
    zombie. Only in the runner, whose one child of its own was already waited for: in the engine it
    would steal the exit status of its other children."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _cgroup_pids(folder: Path) -> list[int]:
    pids: list[int] = []
    try:
        for path in [folder, *[p for p in folder.rglob("*") if p.is_dir()]]:  # the job may nest groups
            pids += [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        pass
    return pids


def _descendants(pid: int, started: float | None) -> list[psutil.Process]:
    """The runner's descendants, while the pid is still the runner's (never a reused pid's)."""
    try:
        proc = psutil.Process(pid)
        if started is not None and not same_start(started, proc.create_time()):
            return []
        return proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _same_session(runner_pid: int, runner_start: float | None) -> list[psutil.Process]:
    """The runner leads its session; after it died, the processes that did not leave it still carry
    its session id. The kernel keeps a session's id from being reused while a member lives, so a
    pid now held by another process means that session is gone (its members cannot be ours)."""
    if runner_start is not None and _held_by_another(runner_pid, runner_start):
        return []
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == runner_pid:
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def _held_by_another(pid: int, started: float) -> bool:
    try:
        return not same_start(started, psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return False


def _carrying(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TOKEN_VAR) == token:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _add(found: dict, pid: int) -> None:
    try:
        found[pid] = psutil.Process(pid)
    except psutil.NoSuchProcess:
        pass


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _rmdir(folder: Path) -> None:
    for _ in range(20):  # the kernel empties a killed group a moment after its last member died
        try:
            for child in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                child.rmdir()
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
