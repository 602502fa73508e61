"""The old trainer's e-mail notices (runbook 001) as a run's ``notify:`` section.

``SWANLAB_EMAIL_YAML`` names a file with the settings of SwanLab's e-mail plugin (``EmailCallback``:
``sender_email``, ``receiver_email``, ``password``, ``smtp_server``, ``port``, ``language``), at the top
level or under ``email:``; the ``SWANLAB_EMAIL_ON_START`` / ``_ON_FINISH`` / ``_ON_INTERRUPT``
switches pick the events (lat_core.config.env.notice_kinds). LAT sends them as the run's notices
(lat_core.notify), with the plugin's transport: implicit TLS on port 465, STARTTLS on any
other port, logged in as the sender. The password goes where every notice credential goes: masked in
the journal, in clear only in the state directory's 0600 secrets file (lat_core.contract.run_secrets).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from lat_core.config.env import EMAIL_YAML_VAR, notice_kinds
from lat_core.errors import LatError

# SwanLab's EmailCallback argument -> LAT's notify.email field (defaults as the plugin's)
SWANLAB_FIELDS = {"sender_email": "sender", "receiver_email": "to", "password": "password",
                  "smtp_server": "host", "port": "port"}
SWANLAB_DEFAULTS = {"smtp_server": "smtp.gmail.com", "port": 587}
REQUIRED = ("sender_email", "receiver_email", "password")
# LAT's own additions: another login than the sender, or a server without TLS (a local relay)
LAT_FIELDS = ("username", "starttls", "ssl")
# accepted so the old file loads as it is; LAT's notices are written in English
IGNORED = ("language",)
SSL_PORT = 465
#: the old ``python -m scripts.utils.email_notify --event ...`` events -> LAT's notice kinds
OLD_EVENTS = {"STARTED": "start", "FINISHED": "finish", "INTERRUPTED": "interrupt", "FAILED": "failure"}


class EmailYamlError(LatError):
    title = "Invalid e-mail notice settings"


def read_email_yaml(path: str | Path) -> dict[str, Any]:
    """The file's settings as a ``notify.email`` mapping; EmailYamlError naming the file otherwise."""
    path = Path(path).expanduser()
    where = f"{path} ({EMAIL_YAML_VAR})"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise EmailYamlError("no such file", where=where) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EmailYamlError(f"cannot read it: {exc}", where=where) from None
    except yaml.YAMLError as exc:
        raise EmailYamlError(f"not valid YAML: {_yaml_problem(exc)}", where=where) from None
    if isinstance(data, Mapping) and isinstance(data.get("email"), Mapping) and len(data) == 1:
        data = data["email"]
    if not isinstance(data, Mapping):
        raise EmailYamlError("expected a mapping of SwanLab e-mail settings (sender_email, receiver_email, "
                             "password, smtp_server, port)", where=where)
    return _to_notify_email(dict(data), where)


def _to_notify_email(data: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(data) - set(SWANLAB_FIELDS) - set(LAT_FIELDS) - set(IGNORED))
    if unknown:
        known = ", ".join([*SWANLAB_FIELDS, *LAT_FIELDS, *IGNORED])
        raise EmailYamlError(f"unknown field {unknown[0]!r} (known: {known})", where=where)
    missing = [name for name in REQUIRED if not data.get(name)]
    if missing:
        raise EmailYamlError(f"missing field {missing[0]!r}", where=where)
    values = {**SWANLAB_DEFAULTS, **data}
    port = values["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise EmailYamlError(f"field 'port': expected a port number, got {port!r}", where=where)
    email = {lat: values[old] for old, lat in SWANLAB_FIELDS.items()}
    email["password"] = str(email["password"])
    email["username"] = data.get("username") or data["sender_email"]
    email["ssl"] = bool(data.get("ssl", port == SSL_PORT))
    email["starttls"] = bool(data.get("starttls", not email["ssl"]))
    return email


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def with_env_notices(notify: Mapping[str, Any] | None, environ: Mapping[str, str]) -> dict[str, Any]:
    """A plan's ``notify:`` with the environment's SWANLAB_EMAIL_YAML (its ``email:``) and
    SWANLAB_EMAIL_ON_* switches (its ``on:``) laid over it; unchanged when none is set."""
    notify = dict(notify or {})
    kinds = notice_kinds(environ)
    if kinds is None:
        return notify
    path = environ.get(EMAIL_YAML_VAR, "").strip()
    if path:
        notify["email"] = read_email_yaml(path)
    notify["on"] = kinds
    return notify
