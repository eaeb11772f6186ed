"""Where notifications land in tests: a webhook receiver (HTTP on loopback) and an SMTP
sink (aiosmtpd), both in the test's process, each keeping what it got and waking
whoever waits for it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.services import free_port


class Inbox:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self.refuse = 0  # answer this many requests with 503 first
        self.redirect = ""  # answer every request with a 307 to this URL

    def add(self, item: dict[str, Any]) -> None:
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The first `n` items, once there are that many."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.items) >= n, timeout):
                raise AssertionError(f"{len(self.items)} of {n} messages arrived: {self.items}")
            return list(self.items[:n])


@contextmanager
def webhook(address: str = "127.0.0.1") -> Iterator[tuple[Inbox, int]]:
    """(inbox, port): every POST's path and JSON body, in arrival order."""
    inbox = Inbox()
    tried: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if inbox.redirect:  # 307 keeps the method and body (RFC 9110 15.4.8)
                self.send_response(307)
                self.send_header("Location", inbox.redirect)
                self.end_headers()
                return
            if inbox.refuse > len(tried):
                tried.append(1)
                self.send_response(503)
                self.end_headers()
                return
            inbox.add({"path": self.path, "body": json.loads(body or b"{}")})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield inbox, int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def smtp_sink() -> Iterator[tuple[Inbox, int]]:
    """(inbox, port): every mail's envelope, subject and text."""
    from aiosmtpd.controller import Controller

    inbox = Inbox()

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
            mail = message_from_bytes(envelope.content, policy=policy.default)
            part = mail.get_body(("plain",)) if mail.is_multipart() else mail
            inbox.add({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                       "subject": str(mail["Subject"]),
                       "text": part.get_content() if part is not None else ""})
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()
