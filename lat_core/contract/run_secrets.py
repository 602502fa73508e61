"""Secrets of a run, kept beside the journal in a 0600 file, never in the journal itself.

The journal's saved plan and job rows hold secrets masked as ``***`` (it is read by every front end,
shown on screens and pasted into bug reports). The values live in ``<state_dir>/secrets.json``
(mode 0600, keyed by run id), written by the front end that creates the run and read by the engine
at launch, so an engine restarted by another front end (whose environment never held them) gives a
job the same environment as before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lat_core.config.env import MASK, is_secret
from lat_core.errors import JournalError
from lat_core.safe_files import check_state_dir

SECRETS_NAME = "secrets.json"
FILE_MODE, DIR_MODE = 0o600, 0o700
# variables the notice settings read from the environment (lat_core.notify)
NOTICE_ENV = ("LAT_SMTP_HOST", "LAT_SMTP_PORT", "LAT_SMTP_USER", "LAT_SMTP_PASSWORD", "LAT_NOTIFY_TO",
              "LAT_SMTP_FROM", "LAT_WEBHOOK_URL")


@dataclass(frozen=True)
class RunSecrets:
    """``env``: secret job variables (plan ``env:``, ``--env``, the launching shell); ``notify``: the
    plan's ``notify:`` section in clear; ``notify_env``: the notice variables of the creating shell."""
    env: Mapping[str, str] = field(default_factory=dict)
    notify: Mapping[str, Any] = field(default_factory=dict)
    notify_env: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.env or self.notify or self.notify_env)

    def __repr__(self) -> str:  # a repr ends up in logs and tracebacks
        return f"RunSecrets(env={sorted(self.env)}, notify={bool(self.notify)}, notify_env={sorted(self.notify_env)})"

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {"env": dict(self.env), "notify": dict(self.notify), "notify_env": dict(self.notify_env)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str) -> RunSecrets:
        if not isinstance(data, Mapping) or not all(isinstance(data.get(k, {}), Mapping) for k in ("env", "notify", "notify_env")):
            raise JournalError("a run's secrets are not a mapping of env / notify / notify_env", where=where)
        return cls({str(k): str(v) for k, v in (data.get("env") or {}).items()}, dict(data.get("notify") or {}),
                   {str(k): str(v) for k, v in (data.get("notify_env") or {}).items()})


def collect(job_envs: Iterable[Mapping[str, str]], notify: Mapping[str, Any] | None, environ: Mapping[str, str]) -> RunSecrets:
    """The secrets a new run needs: secret variables of its jobs' env, its notice settings and the
    variables those settings read (``password_env`` and the ``LAT_*`` notice variables)."""
    env = {k: v for job_env in job_envs for k, v in job_env.items() if is_secret(k) and v and v != MASK}
    notify = dict(notify or {})
    named = [str(section.get(k)) for section in notify.values() if isinstance(section, Mapping)
             for k in section if str(k).endswith("_env") and section.get(k)]
    notify_env = {k: environ[k] for k in (*NOTICE_ENV, *named) if environ.get(k)}
    return RunSecrets(env, notify, notify_env)


class SecretFile:
    """``<state_dir>/secrets.json``: run id -> RunSecrets. Written under the run-creation lock."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / SECRETS_NAME

    def save(self, run_id: int, secrets: RunSecrets) -> None:
        if not secrets:
            return
        data = self._read()
        data[str(run_id)] = secrets.to_json()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.chmod(tmp, FILE_MODE)  # an old temp file keeps its mode through O_CREAT
            os.replace(tmp, self.path)
        except OSError as exc:
            raise JournalError(f"cannot write secrets: {exc.strerror}; free space or fix permissions of the "
                               "state directory", where=str(self.path)) from exc

    def load(self, run_id: int) -> RunSecrets:
        """The run's secrets (empty when it has none)."""
        entry = self._read().get(str(run_id))
        return RunSecrets.from_json(entry, where=f"{self.path} (run {run_id})") if entry else RunSecrets()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise JournalError(f"cannot read secrets ({exc}); remove the file to forget the saved secrets "
                               "(jobs then get them from the engine's environment)", where=str(self.path)) from exc
        if not isinstance(data, dict):
            raise JournalError("not a JSON object of run id -> secrets", where=str(self.path))
        return data


def secure_state_dir(state_dir: Path, names: Iterable[str]) -> None:
    """The state directory 0700 and the named files in it (journal, its WAL files, secrets) 0600:
    another user could read the journal's history or append commands to it. One that another user
    made (or put a file in) is refused, not taken over: its journal could hold jobs they planted."""
    state_dir = Path(state_dir)
    check_state_dir(state_dir)
    state_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if state_dir.stat().st_mode & 0o777 != DIR_MODE:
        os.chmod(state_dir, DIR_MODE)
    for name in names:
        path = state_dir / name
        if path.exists() and path.stat().st_mode & 0o777 != FILE_MODE:
            os.chmod(path, FILE_MODE)


def create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (SQLite then keeps that mode for its
    -wal and -shm files).

    An existing file is never opened: closing any descriptor of a database file drops every POSIX
    lock this process holds on it, SQLite's included, and another connection of this process (a
    test's, the TUI's other thread) then read a frozen snapshot of the journal."""
    if path.exists():
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return  # another process created it a moment ago
    os.close(fd)


class JobSecrets:
    """The engine's view: a run's secrets from its file (read once per run), else the engine's own
    environment (runs created before secrets were kept in the file)."""

    def __init__(self, state_dir: Path, environ: Mapping[str, str]):
        self._file, self._environ = SecretFile(state_dir), environ
        self._by_run: dict[int, RunSecrets] = {}

    def of(self, run_id: int) -> RunSecrets:
        if run_id not in self._by_run:
            self._by_run[run_id] = self._file.load(run_id)
        return self._by_run[run_id]

    def unmask(self, run_id: int, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` as the journal holds it, with each ``***`` replaced by its value; a secret found
        nowhere is left out (never passed on as ``***``)."""
        saved = self.of(run_id).env
        plain = {k: v for k, v in env.items() if v != MASK}
        known = {k: saved.get(k) or self._environ.get(k) for k, v in env.items() if v == MASK}
        return {**plain, **{k: v for k, v in known.items() if v and v != MASK}}
