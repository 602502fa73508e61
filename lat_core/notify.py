"""Notices (e-mail, webhook) on run start, run finish, a run's interruption (cancelled), each failure
and each OOM.

Why notices never raise: a mail server that is down must not stop a queue of training jobs, so a
failed notice is logged and reported as False. Why secrets are masked everywhere: plans, logs and
reprs end up in bug reports and shared terminals; passwords and webhook tokens must not.

    notices = Notices.from_config(plan_dict.get("notify"), environ=os.environ)
    notices.emit("failure", "job cola/lora_r8 failed", "CUDA out of memory ...")
"""

from __future__ import annotations

import json
import logging
import os
import smtplib
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterable, Mapping
from email.message import EmailMessage
from http.client import HTTPMessage
from typing import IO, Any, Protocol
from urllib.parse import urlsplit

from lat_core.errors import LatError

log = logging.getLogger(__name__)

KINDS = ("start", "finish", "interrupt", "failure", "oom", "paused")  # paused: the circuit breaker stopped admission
MASK = "***"
DEFAULT_TIMEOUT_S = 10.0
SECRET_HEADER_WORDS = ("auth", "token", "key", "secret", "password", "cookie")


class NoticeError(LatError):
    title = "Invalid notification settings"


class Notifier(Protocol):
    def send(self, kind: str, subject: str, body: str) -> bool: ...


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


class PlaintextRefused(smtplib.SMTPException):
    """The server offers no STARTTLS and plain text was not allowed: nothing was sent."""


class SmtpNotifier:
    """SMTP through smtplib: STARTTLS (the default), implicit TLS (``ssl``, port 465) or, only when
    ``starttls`` is False, plain text; optionally AUTH.

    Why STARTTLS is required by default: a login over plain text hands the password to anyone on the
    path, and a server (or a man in the middle) that does not offer STARTTLS must not get it."""

    def __init__(self, host: str, port: int, sender: str, to: str | Iterable[str], username: str | None = None,
                 password: str | None = None, starttls: bool = True,
                 timeout: float = DEFAULT_TIMEOUT_S, ssl: bool = False) -> None:
        self.host, self.port, self.sender = host, int(port), sender
        self.to = [to] if isinstance(to, str) else list(to)
        self.username, self._password = username, password
        self.starttls, self.ssl, self.timeout = bool(starttls), bool(ssl), timeout
        if not self.to:
            raise NoticeError("no recipient", where="notify.email.to")

    def __repr__(self) -> str:
        password = MASK if self._password else None
        return (f"SmtpNotifier(host={self.host!r}, port={self.port}, sender={self.sender!r}, "
                f"to={self.to!r}, username={self.username!r}, password={password!r}, "
                f"starttls={self.starttls}, ssl={self.ssl})")

    def message(self, subject: str, body: str) -> EmailMessage:
        msg = EmailMessage()
        msg["Subject"], msg["From"], msg["To"] = subject, self.sender, ", ".join(self.to)
        msg.set_content(body)
        return msg

    def _connect(self) -> smtplib.SMTP:
        if self.ssl:
            return smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=ssl.create_default_context())
        return smtplib.SMTP(self.host, self.port, timeout=self.timeout)

    def _deliver(self, msg: EmailMessage) -> None:
        with self._connect() as smtp:
            if self.starttls and not self.ssl:
                smtp.ehlo()
                if not smtp.has_extn("starttls"):
                    raise PlaintextRefused("the server offers no STARTTLS; nothing was sent (set starttls: false "
                                           "to mail over plain text, e.g. through a local relay)")
                smtp.starttls(context=ssl.create_default_context())
            if self.username and self._password:
                smtp.login(self.username, self._password)
            smtp.send_message(msg)

    def send(self, kind: str, subject: str, body: str) -> bool:
        """Send one mail; False (and a log record without secrets) when it cannot be delivered."""
        try:
            self._deliver(self.message(subject, body))
        except (OSError, smtplib.SMTPException) as exc:
            detail = scrub(f"{type(exc).__name__}: {exc}", [self._password])
            log.warning("%s notice by mail via %s:%s failed: %s", kind, self.host, self.port, detail)
            return False
        log.info("%s notice mailed to %s", kind, ", ".join(self.to))
        return True


def mask_url(url: str) -> str:
    """Scheme and host only: webhook paths and queries usually are the secret (Slack, Discord)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    tail = f"/{MASK}" if (parts.path.strip("/") or parts.query) else ""
    return f"{parts.scheme}://{host}{port}{tail}"


def _is_secret_header(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_HEADER_WORDS)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class _CredentialSafeRedirect(urllib.request.HTTPRedirectHandler):
    """Follows a redirect as urllib does, but sends the credential headers (Authorization, API keys,
    cookies) only to the webhook's own origin: a 302 to another host must not collect them."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: HTTPMessage, newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            for name in [k for k in new.headers if _is_secret_header(k)]:
                del new.headers[name]
        return new


class WebhookNotifier:
    """POSTs ``{"kind", "subject", "body", "time", "host"}`` as JSON with urllib."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        if urlsplit(url).scheme not in ("http", "https"):
            raise NoticeError(f"expected an http(s) URL, got {mask_url(url)!r}", where="notify.webhook.url")
        self._url, self._headers, self.timeout = url, dict(headers or {}), timeout

    def __repr__(self) -> str:
        headers = {k: MASK if _is_secret_header(k) else v for k, v in self._headers.items()}
        return f"WebhookNotifier(url={mask_url(self._url)!r}, headers={headers!r})"

    def payload(self, kind: str, subject: str, body: str) -> bytes:
        return json.dumps({"kind": kind, "subject": subject, "body": body, "time": time.time(),
                           "host": socket.gethostname()}).encode()

    def _secrets(self) -> list[str]:
        parts = urlsplit(self._url)
        return [self._url, parts.path, parts.query, *(v for k, v in self._headers.items()
                                                       if _is_secret_header(k))]

    def send(self, kind: str, subject: str, body: str) -> bool:
        """POST one notice; False (and a log record without secrets) on any transport error."""
        request = urllib.request.Request(
            self._url, data=self.payload(kind, subject, body), method="POST",
            headers={"Content-Type": "application/json", **self._headers})
        try:
            with urllib.request.build_opener(_CredentialSafeRedirect).open(request, timeout=self.timeout) as response:
                status = response.status
        except (OSError, ValueError) as exc:
            detail = scrub(f"{type(exc).__name__}: {exc}", [s for s in self._secrets() if len(s) > 1])
            log.warning("%s notice to webhook %s failed: %s", kind, mask_url(self._url), detail)
            return False
        log.info("%s notice posted to %s (HTTP %s)", kind, mask_url(self._url), status)
        return True


class Notices:
    """The notifiers of a run and the kinds of notice they are sent (``on``)."""

    def __init__(self, notifiers: Iterable[Notifier] = (), on: str | Iterable[str] = KINDS) -> None:
        self.notifiers = list(notifiers)
        self.on = frozenset(_check_kinds(on))

    def __repr__(self) -> str:
        return f"Notices(notifiers={self.notifiers!r}, on={sorted(self.on)!r})"

    def __bool__(self) -> bool:
        return bool(self.notifiers)

    def emit(self, kind: str, subject: str, body: str) -> list[bool]:
        """Send to every notifier when ``kind`` is subscribed; one bool per notifier, [] if not."""
        _check_kinds([kind])
        if kind not in self.on:
            return []
        return [_send_guarded(n, kind, subject, body) for n in self.notifiers]

    @classmethod
    def from_config(cls, notify: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> Notices:
        """From a plan's ``notify:`` mapping, with ``LAT_*`` environment variables filling gaps."""
        notify = dict(notify or {})
        environ = os.environ if environ is None else environ
        email = {**_email_from_env(environ), **dict(notify.get("email") or {})}
        webhook = {**_webhook_from_env(environ), **dict(notify.get("webhook") or {})}
        notifiers: list[Notifier] = []
        if email.get("host") or notify.get("email"):
            notifiers.append(smtp_from_mapping(email, environ))
        if webhook.get("url") or notify.get("webhook"):
            notifiers.append(webhook_from_mapping(webhook))
        on = notify.get("on")  # an explicit [] sends none (every SWANLAB_EMAIL_ON_* switch at 0)
        return cls(notifiers, on=KINDS if on is None else on)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notices:
        return cls.from_config(None, environ)


def _send_guarded(notifier: Notifier, kind: str, subject: str, body: str) -> bool:
    """A notifier's send, with any non-OSError surprise logged as a failed notice."""
    try:
        return bool(notifier.send(kind, subject, body))
    except (RuntimeError, ValueError, TypeError, LookupError) as exc:
        log.warning("%s notice via %s failed: %s", kind, type(notifier).__name__, type(exc).__name__)
        return False


def _check_kinds(kinds: str | Iterable[str]) -> list[str]:
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise NoticeError(f"unknown notice kind(s) {unknown}; expected some of {list(KINDS)}",
                          where="notify.on")
    return kinds


def _email_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    names = {"host": "LAT_SMTP_HOST", "port": "LAT_SMTP_PORT", "username": "LAT_SMTP_USER",
             "password": "LAT_SMTP_PASSWORD", "to": "LAT_NOTIFY_TO", "sender": "LAT_SMTP_FROM",
             "starttls": "LAT_SMTP_STARTTLS"}
    return {key: environ[name] for key, name in names.items() if environ.get(name)}


def _webhook_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {"url": environ["LAT_WEBHOOK_URL"]} if environ.get("LAT_WEBHOOK_URL") else {}


def _truthy(value: object) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


def _recipients(value: str | Iterable[object] | None) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value or [])
    return [str(i).strip() for i in items if str(i).strip()]


def smtp_from_mapping(cfg: Mapping[str, Any], environ: Mapping[str, str]) -> SmtpNotifier:
    """``{host, port, sender|from, to, username, password | password_env, starttls, ssl}``; STARTTLS
    unless ``ssl`` or an explicit ``starttls: false``."""
    if not cfg.get("host"):
        raise NoticeError("missing host (or LAT_SMTP_HOST)", where="notify.email.host")
    try:
        port = int(cfg.get("port") or 25)
    except (TypeError, ValueError):
        raise NoticeError(f"port must be a number, got {cfg.get('port')!r}", where="notify.email.port") from None
    password = cfg.get("password") or environ.get(str(cfg.get("password_env") or ""), None)
    sender = cfg.get("sender") or cfg.get("from") or f"lat@{socket.gethostname()}"
    to = _recipients(cfg.get("to"))
    if not to:
        raise NoticeError("missing recipients (or LAT_NOTIFY_TO)", where="notify.email.to")
    use_ssl = _truthy(cfg.get("ssl", False))
    return SmtpNotifier(str(cfg["host"]), port, str(sender), to, username=cfg.get("username") or cfg.get("user"),
                        password=password, starttls=_truthy(cfg.get("starttls", not use_ssl)), ssl=use_ssl)


def webhook_from_mapping(cfg: Mapping[str, Any]) -> WebhookNotifier:
    """``{url, headers}``."""
    if not cfg.get("url"):
        raise NoticeError("missing url (or LAT_WEBHOOK_URL)", where="notify.webhook.url")
    headers = cfg.get("headers") or {}
    if not isinstance(headers, Mapping):
        raise NoticeError("headers must be a mapping", where="notify.webhook.headers")
    return WebhookNotifier(str(cfg["url"]), {str(k): str(v) for k, v in headers.items()})
