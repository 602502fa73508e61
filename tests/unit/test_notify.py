"""Notices against a real local SMTP server (aiosmtpd) and a local HTTP webhook receiver."""

from __future__ import annotations

import email
import json
import logging
import shutil
import socket
import ssl
import subprocess
import threading
from contextlib import contextmanager
from email import policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from lat_core.notify import (KINDS, NoticeError, Notices, SmtpNotifier, WebhookNotifier,
                             mask_url)

PASSWORD = "s3cr3t-Pa55word"
USER = "lat-bot"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Inbox:
    """aiosmtpd handler that keeps every message it accepts."""

    def __init__(self):
        self.messages: list[email.message.EmailMessage] = []
        self.envelopes = []
        self.logins: list[bool] = []   # one per AUTH the server saw: whether it came over TLS

    async def handle_DATA(self, server, session, envelope):
        self.envelopes.append(envelope)
        self.messages.append(email.message_from_bytes(envelope.content, policy=policy.default))
        return "250 OK"


def check_login(server, session, envelope, mechanism, auth_data):
    server.event_handler.logins.append(server.transport.get_extra_info("ssl_object") is not None)
    ok = isinstance(auth_data, LoginPassword) and auth_data.login == USER.encode() \
        and auth_data.password == PASSWORD.encode()
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def smtp_server():
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port(),
                            authenticator=check_login, auth_require_tls=False,
                            auth_exclude_mechanism=["LOGIN"])
    controller.start()
    try:
        yield controller, inbox
    finally:
        controller.stop()


@pytest.fixture
def starttls_server(tmp_path, monkeypatch):
    """An SMTP server that offers STARTTLS and AUTH only after it, with a self-signed certificate for
    127.0.0.1 that this process trusts through SSL_CERT_FILE."""
    assert shutil.which("openssl"), "the test server's certificate is made with openssl"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem")], check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port(), authenticator=check_login,
                            tls_context=context, require_starttls=True, auth_exclude_mechanism=["LOGIN"])
    controller.start()
    try:
        yield controller, inbox
    finally:
        controller.stop()


class Receiver(BaseHTTPRequestHandler):
    received: list = []
    status = 200
    location = ""   # set: answer a POST with a 302 to here

    def do_GET(self):   # urllib follows a 302 to a POST with a GET
        self.received.append((self.path, dict(self.headers), None))
        self.send_response(200)
        self.end_headers()

    def do_POST(self):
        if self.location:
            self.send_response(302)
            self.send_header("Location", self.location)
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length", 0))
        self.received.append((self.path, dict(self.headers), json.loads(self.rfile.read(length))))
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@contextmanager
def http_receiver():
    handler = type("TestReceiver", (Receiver,), {"received": [], "status": 200, "location": ""})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def webhook_server():
    with http_receiver() as served:
        yield served


def test_smtp_delivers_with_login_and_never_logs_password(smtp_server, caplog):
    controller, inbox = smtp_server
    caplog.set_level(logging.DEBUG)
    notifier = SmtpNotifier("127.0.0.1", controller.port, "lat@example.org", ["a@example.org", "b@example.org"],
                            username=USER, password=PASSWORD, starttls=False)
    assert notifier.send("finish", "run 7 finished", "12 jobs ok, 0 failed") is True
    (message,) = inbox.messages
    assert message["Subject"] == "run 7 finished" and message["From"] == "lat@example.org"
    assert message.get_content().strip() == "12 jobs ok, 0 failed"
    assert inbox.envelopes[0].rcpt_tos == ["a@example.org", "b@example.org"]
    assert PASSWORD not in repr(notifier) and "***" in repr(notifier)
    assert "finish notice mailed" in caplog.text and PASSWORD not in caplog.text


def test_smtp_wrong_password_returns_false_and_masks(smtp_server, caplog):
    controller, inbox = smtp_server
    caplog.set_level(logging.DEBUG)
    wrong = PASSWORD + "-wrong"
    notifier = SmtpNotifier("127.0.0.1", controller.port, "lat@example.org", "a@example.org",
                            username=USER, password=wrong, starttls=False)
    assert notifier.send("failure", "job failed", "body") is False
    assert not inbox.messages
    assert "SMTPAuthenticationError" in caplog.text and wrong not in caplog.text


def test_smtp_never_logs_in_over_plain_text_unless_told(smtp_server, caplog):
    controller, inbox = smtp_server   # offers no STARTTLS
    caplog.set_level(logging.WARNING)
    notices = Notices.from_config({"email": {"host": "127.0.0.1", "port": controller.port, "to": "a@x",
                                             "username": USER, "password": PASSWORD}}, environ={})
    assert notices.emit("failure", "job failed", "body") == [False]
    assert inbox.logins == [] and inbox.messages == []   # the password never went over the wire
    assert "PlaintextRefused" in caplog.text and "offers no STARTTLS" in caplog.text and PASSWORD not in caplog.text
    plain = SmtpNotifier("127.0.0.1", controller.port, "lat@x", "a@x", username=USER, password=PASSWORD,
                         starttls=False)
    assert plain.send("failure", "job failed", "body") is True and inbox.logins == [False]


def test_smtp_logs_in_over_starttls_by_default(starttls_server):
    controller, inbox = starttls_server
    notifier = SmtpNotifier("127.0.0.1", controller.port, "lat@x", "a@x", username=USER, password=PASSWORD)
    assert notifier.send("finish", "run finished", "ok") is True
    assert inbox.logins == [True] and inbox.messages[0]["Subject"] == "run finished"


def test_smtp_closed_port_returns_false_and_logs(caplog):
    caplog.set_level(logging.WARNING)
    notifier = SmtpNotifier("127.0.0.1", free_port(), "lat@x", "a@x", username=USER,
                            password=PASSWORD, timeout=2)
    assert notifier.send("oom", "OOM on GPU 3", "CUDA out of memory") is False
    assert "oom notice by mail" in caplog.text and "failed" in caplog.text
    assert PASSWORD not in caplog.text


def test_webhook_posts_json(webhook_server, caplog):
    url, handler = webhook_server
    caplog.set_level(logging.DEBUG)
    notifier = WebhookNotifier(f"{url}/hooks/T0K3N", headers={"Authorization": "Bearer abc123", "X-Run": "7"})
    assert notifier.send("start", "run 7 started", "3 GPUs, 24 jobs") is True
    ((path, headers, payload),) = handler.received
    assert path == "/hooks/T0K3N" and headers["Authorization"] == "Bearer abc123"
    assert headers["Content-Type"] == "application/json"
    assert payload["kind"] == "start" and payload["subject"] == "run 7 started"
    assert payload["body"] == "3 GPUs, 24 jobs" and payload["host"]
    assert "T0K3N" not in repr(notifier) and "abc123" not in repr(notifier) and "'7'" in repr(notifier)
    assert "T0K3N" not in caplog.text and "abc123" not in caplog.text


def test_a_redirect_to_another_origin_gets_no_credentials(webhook_server):
    elsewhere, landed = webhook_server
    secret = {"Authorization": "Bearer abc123", "X-Api-Key": "k-456", "X-Run": "7"}
    with http_receiver() as (hook, hook_handler):
        hook_handler.location = f"{elsewhere}/landed"
        assert WebhookNotifier(f"{hook}/hooks/T0K3N", headers=secret).send("start", "s", "b") is True
        hook_handler.location = f"{hook}/moved"   # the same origin: the credentials go along
        assert WebhookNotifier(f"{hook}/hooks/T0K3N", headers=secret).send("start", "s", "b") is True
    ((path, headers, _),) = landed.received
    assert path == "/landed" and headers["X-Run"] == "7"
    assert "Authorization" not in headers and "X-Api-Key" not in headers
    ((path, headers, _),) = hook_handler.received
    assert path == "/moved" and headers["Authorization"] == "Bearer abc123" and headers["X-Api-Key"] == "k-456"


def test_webhook_http_error_and_closed_port_return_false(webhook_server, caplog):
    url, handler = webhook_server
    handler.status = 500
    caplog.set_level(logging.WARNING)
    assert WebhookNotifier(f"{url}/hooks/T0K3N").send("failure", "s", "b") is False
    assert "HTTP Error 500" in caplog.text and "T0K3N" not in caplog.text
    closed = WebhookNotifier(f"http://127.0.0.1:{free_port()}/x", timeout=2)
    assert closed.send("failure", "s", "b") is False


def test_notices_emit_filters_kinds_and_never_raises(smtp_server, webhook_server):
    controller, inbox = smtp_server
    url, handler = webhook_server
    plan = {"email": {"host": "127.0.0.1", "port": controller.port, "from": "lat@x", "to": ["a@x"], "starttls": False},
            "webhook": {"url": url + "/h"}, "on": ["failure", "oom"]}
    notices = Notices.from_config(plan, environ={})
    assert notices.emit("start", "s", "b") == []
    assert notices.emit("oom", "OOM job 3", "details") == [True, True]
    assert inbox.messages[0]["Subject"] == "OOM job 3" and handler.received[0][2]["kind"] == "oom"
    broken = Notices([SmtpNotifier("127.0.0.1", free_port(), "x@x", "y@x", timeout=2)])
    assert broken.emit("failure", "s", "b") == [False]
    with pytest.raises(NoticeError):
        notices.emit("party", "s", "b")


def test_from_env_and_masking(smtp_server):
    controller, inbox = smtp_server
    env = {"LAT_SMTP_HOST": "127.0.0.1", "LAT_SMTP_PORT": str(controller.port), "LAT_SMTP_USER": USER,
           "LAT_SMTP_PASSWORD": PASSWORD, "LAT_NOTIFY_TO": "a@x, b@x", "LAT_SMTP_STARTTLS": "0",
           "LAT_WEBHOOK_URL": "https://hooks.example.org/services/T0K3N"}
    notices = Notices.from_env(env)
    assert set(notices.on) == set(KINDS) and len(notices.notifiers) == 2
    text = repr(notices)
    assert PASSWORD not in text and "T0K3N" not in text and "hooks.example.org" in text
    assert notices.notifiers[0].send("finish", "done", "ok") is True
    assert inbox.envelopes[0].rcpt_tos == ["a@x", "b@x"]


def test_plan_overrides_env_and_password_env():
    env = {"LAT_SMTP_HOST": "env-host", "MY_PW": PASSWORD}
    notices = Notices.from_config({"email": {"host": "plan-host", "to": "a@x", "password_env": "MY_PW",
                                             "username": "u"}}, environ=env)
    (smtp,) = notices.notifiers
    assert smtp.host == "plan-host" and smtp.port == 25 and smtp._password == PASSWORD
    assert Notices.from_config(None, environ={}).notifiers == []


@pytest.mark.parametrize("config, where", [
    ({"email": {"to": "a@x"}}, "notify.email.host"),
    ({"email": {"host": "h"}}, "notify.email.to"),
    ({"email": {"host": "h", "to": "a", "port": "smtp"}}, "notify.email.port"),
    ({"webhook": {"url": "ftp://x/y"}}, "notify.webhook.url"),
    ({"webhook": {"url": "http://x", "headers": ["a"]}}, "notify.webhook.headers"),
    ({"on": ["start", "lunch"]}, "notify.on"),
])
def test_config_errors_name_the_field(config, where):
    with pytest.raises(NoticeError) as info:
        Notices.from_config(config, environ={})
    assert info.value.where == where


def test_mask_url():
    assert mask_url("https://hooks.slack.com/services/A/B/C") == "https://hooks.slack.com/***"
    assert mask_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
