"""A fake GCE metadata server on loopback, for tests.

In-process::

    with FakeMetadata() as md:
        md.url                      # http://127.0.0.1:PORT/computeMetadata/v1/
        md.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        md.set("instance/upcoming-maintenance", {"window_start_time": "...", ...})
        md.set("instance/upcoming-maintenance", None)   # nothing pending, as GCE says it
        md.set("instance/preempted", Reply(503, "..."))  # any answer, as it is
        md.set("instance/attributes/tpu-env", None)     # absent -> 404

As a subprocess (so an end-to-end test can flip values in another process)::

    python -m tests.fakes.metadata_server --port 0 --state-file state.json

prints its base URL on the first stdout line.  The state file is a JSON object of
key -> value (string, JSON object, or null for absent) layered over the defaults; it is
re-read on every request, while hanging GETs wait, and on SIGHUP.

Protocol, as GCE does it: the ``Metadata-Flavor: Google`` header is required (403
otherwise); every value carries an ``ETag``; ``?wait_for_change=true`` hangs until the
value's ETag differs from ``last_etag`` (or from the current one when ``last_etag`` is
absent), or until ``timeout_sec`` passes, then returns the current value.
``FakeMetadata(etags=False)`` sends no ETag, as a server a client must poll.

Each response shape names its source beside it (`answer`, `_upcoming`); docs/tpu-facts.md
lists them. What no source shows is not invented here: a test that needs another answer
sets it with `Reply`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from typing_extensions import Self

PREFIX = "/computeMetadata/v1/"
UPCOMING = "instance/upcoming-maintenance"
DEFAULTS: dict[str, Any] = {
    # Compute Engine docs, "Query the metadata server for maintenance event notices":
    # NONE, MIGRATE_ON_HOST_MAINTENANCE or TERMINATE_ON_HOST_MAINTENANCE
    "instance/maintenance-event": "NONE",
    # Compute Engine docs, "Detect if a VM was preempted": TRUE or FALSE
    "instance/preempted": "FALSE",
    "instance/name": "t1v-n-fake-w-0",
    "instance/attributes/accelerator-type": "v4-8",
    "instance/attributes/agent-worker-number": "0",
    UPCOMING: None,  # nothing pending (see _upcoming)
}
NOT_FOUND_BODY = "<!DOCTYPE html>\n<title>Error 404 (Not Found)!!1</title>\n"
FORBIDDEN_BODY = "Missing Metadata-Flavor:Google header.\n"
# Google's sapagent, internal/processmetrics/infra/infra.go
# (metadataNoUpcomingMaintenanceResponse): what the server says before any notice
NO_NOTIFICATIONS_BODY = '{ "error": "no notifications have been received yet, try again later" }'
MAX_WAIT_S = 300.0  # upper bound for a hanging GET without timeout_sec
POLL_S = 0.05  # how often waiters re-check a state file changed by another process


@dataclass(frozen=True)
class Reply:
    """An answer exactly as given: for shapes a test wants to send as they are."""

    status: int
    body: str


def _canon(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Reply):
        return f"{value.status}\0{value.body}"
    return json.dumps(value, sort_keys=True)


def etag_of(value: Any) -> str:
    """Content-derived ETag, like GCE's: equal values have equal ETags."""
    text = _canon(value)
    return hashlib.sha1((text if text is not None else "\0absent").encode()).hexdigest()[:16]


def _upcoming(value: Any, as_json: bool) -> tuple[int, str]:
    """`instance/upcoming-maintenance` as GCE serves it. A window (a dict of its fields):
    with `?alt=json` that object (snake_case keys: Compute Engine docs, 2026-04; the TPU
    docs show camelCase, which a test may set); without it, "key value" lines (Google's
    sapagent, infra_test.go `upcomingMaintenanceViaMetadataServerBody`). Nothing pending:
    `{}` with `?alt=json` (Compute Engine docs), else HTTP 503 and sapagent's error body."""
    if value is None:
        return (200, "{}") if as_json else (503, NO_NOTIFICATIONS_BODY)
    if isinstance(value, str):
        return 200, value
    if as_json:
        return 200, json.dumps(value)
    return 200, "\n".join(f"{k} {str(v).lower() if isinstance(v, bool) else v}"
                          for k, v in sorted(value.items()))


def answer(key: str, value: Any, query: dict[str, str]) -> tuple[int, str]:
    """(status, body) for `key` holding `value`: a string as it is, an object as JSON
    (`?alt=json` is how GCE is asked for JSON), an absent key 404 with GCE's HTML page."""
    if isinstance(value, Reply):
        return value.status, value.body
    if key == UPCOMING:
        return _upcoming(value, query.get("alt") == "json")
    if value is None:
        return 404, NOT_FOUND_BODY
    return 200, value if isinstance(value, str) else json.dumps(value)


class FakeMetadata:
    """The server; a context manager that serves on 127.0.0.1 in a daemon thread."""

    def __init__(self, port: int = 0, state_file: Path | str | None = None,
                 etags: bool = True) -> None:
        self._cond = threading.Condition()
        self.etags = etags
        self._values: dict[str, Any] = dict(DEFAULTS)
        self._state_file = Path(state_file) if state_file else None
        self._file_mtime: int | None = None
        self._closing = False
        self.requests: list[str] = []  # request paths, for assertions
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _make_handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.reload()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PREFIX}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-metadata", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        with self._cond:
            self._closing = True  # releases hanging GETs at once
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def set(self, key: str, value: Any) -> None:
        """Set a value (str, JSON-able object, or Reply); None makes the key absent
        (404), except upcoming-maintenance, where it means nothing pending."""
        with self._cond:
            self._values[key.strip("/")] = value
            self._cond.notify_all()

    def get(self, key: str) -> Any:
        with self._cond:
            self._refresh_locked()
            return self._values.get(key.strip("/"))

    def record(self, path: str) -> None:
        with self._cond:
            self.requests.append(path)
            self._cond.notify_all()

    def wait_for_request(self, substring: str, timeout_s: float = 10.0) -> bool:
        """Block until a request whose path contains ``substring`` arrived (for tests)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: any(substring in p for p in self.requests), timeout_s
            )

    def reload(self) -> None:
        """Re-read the state file now (the SIGHUP action)."""
        with self._cond:
            self._file_mtime = None
            self._refresh_locked()

    def _refresh_locked(self) -> None:
        if self._state_file is None:
            return
        try:
            mtime = self._state_file.stat().st_mtime_ns
            if mtime == self._file_mtime:
                return
            data = json.loads(self._state_file.read_text() or "{}")
        except (OSError, ValueError):
            return  # missing or half-written file: keep the last good values
        self._file_mtime = mtime
        values: dict[str, Any] = dict(DEFAULTS)
        values.update({k.strip("/"): v for k, v in data.items()})
        if values != self._values:
            self._values = values
            self._cond.notify_all()

    def wait_for_change(self, key: str, last_etag: str | None, timeout_s: float) -> Any:
        """Block until ``key``'s ETag differs from ``last_etag`` or the timeout; return value."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._refresh_locked()
            if last_etag is None:
                last_etag = etag_of(self._values.get(key))
            while not self._closing:
                value = self._values.get(key)
                remaining = deadline - time.monotonic()
                if etag_of(value) != last_etag or remaining <= 0:
                    return value
                # Short waits so a state file written by another process is noticed.
                self._cond.wait(min(remaining, POLL_S if self._state_file else remaining))
                self._refresh_locked()
            return self._values.get(key)


def _make_handler(md: FakeMetadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            md.record(self.path)
            parts = urlsplit(self.path)
            if self.headers.get("Metadata-Flavor") != "Google":
                self._reply(403, FORBIDDEN_BODY)
                return
            if not parts.path.startswith(PREFIX):
                self._reply(404, NOT_FOUND_BODY)
                return
            key = parts.path[len(PREFIX):].strip("/")
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            if query.get("wait_for_change", "").lower() == "true":
                timeout_s = float(query.get("timeout_sec") or MAX_WAIT_S)
                value = md.wait_for_change(key, query.get("last_etag"), timeout_s)
            else:
                value = md.get(key)
            status, body = answer(key, value, query)
            self._reply(status, body, etag=etag_of(value) if md.etags and status == 200 else None)

        def _reply(self, status: int, body: str, etag: str | None = None) -> None:
            data = body.encode()
            try:
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", "application/text")
                self.send_header("Content-Length", str(len(data)))
                if etag:
                    self.send_header("ETag", etag)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client (an agent a test just killed) hung up mid-wait

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="fake GCE metadata server")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--state-file", type=Path)
    args = p.parse_args(argv)
    md = FakeMetadata(args.port, args.state_file)
    stop = threading.Event()
    signal.signal(signal.SIGHUP, lambda *_: md.reload())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    md.start()
    print(md.url, flush=True)
    while not stop.wait(1.0):
        pass
    md.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
