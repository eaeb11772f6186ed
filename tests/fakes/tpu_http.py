"""The fake Cloud TPU API (tpu_api.FakeCloud) served over REST.

- `FakeTpuServer`: a real HTTP server on loopback; TPUQ_TPU_API_ENDPOINT points at it.
- `InProcessAdapter`: the same routes handed to a requests session inside the process,
  so a property test runs the real google-cloud-tpu client through thousands of
  sequences without sockets. `mount(client, cloud)` puts it under a client.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import requests
from requests.adapters import BaseAdapter

from tests.fakes.tpu_api import FakeCloud, Hang, HttpFault


def answer(cloud: FakeCloud, method: str, url: str, body: bytes | None) -> tuple[int, Any]:
    """(HTTP status, JSON body) of one request; raises Hang for a timeout fault."""
    u = urlsplit(url)
    query = dict(parse_qsl(u.query))
    try:
        data = json.loads(body) if body else None
        return 200, cloud.request(method, u.path, query, data)
    except HttpFault as e:
        return e.status, e.body()
    except json.JSONDecodeError:
        return 400, HttpFault("INVALID_ARGUMENT", "Invalid JSON payload received.").body()


class FakeTpuServer:
    def __init__(self, cloud: FakeCloud, hang_s: float = 3.0) -> None:
        self.cloud = cloud
        self.hang = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                try:
                    status, data = answer(fake.cloud, self.command, self.path, body)
                except Hang:
                    fake.hang.wait(hang_s)  # longer than the client waits
                    return
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = do_PATCH = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeTpuServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.hang.set()
        self.server.shutdown()
        self.server.server_close()


class InProcessAdapter(BaseAdapter):
    """A requests transport that answers from the fake without a socket."""

    def __init__(self, cloud: FakeCloud) -> None:
        super().__init__()
        self.cloud = cloud

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        body = request.body.encode() if isinstance(request.body, str) else request.body
        try:
            status, data = answer(self.cloud, request.method or "GET", request.url or "", body)
        except Hang:
            raise requests.exceptions.ReadTimeout("fake: the API did not answer in time",
                                                  request=request) from None
        r = requests.Response()
        r.status_code = status
        r._content = json.dumps(data).encode()
        r.headers["Content-Type"] = "application/json"
        r.url = request.url or ""
        r.request = request
        r.encoding = "utf-8"
        return r

    def close(self) -> None:
        pass


def mount(client: Any, cloud: FakeCloud) -> InProcessAdapter:
    """Route a google-cloud-tpu REST client's requests (and its operations client's)
    to `cloud` in-process; the adapter's `cloud` may be swapped later."""
    session = client.transport._session
    adapter = InProcessAdapter(cloud)
    session.mount("http://", adapter)
    session.trust_env = False  # no proxy lookup in the environment per request
    return adapter
