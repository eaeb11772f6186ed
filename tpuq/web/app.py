"""The Starlette application: routes, the sign-in gate, errors as pages; serving it.

Every route but /login, /metrics and /static needs a session (401 and the sign-in
form without one). Every POST needs the session's CSRF token and, from a browser, this
site as its Origin (403 without). What a signed-in person may see or do is the
handlers' answer (tpuq/api/handlers.py), never this module's.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from tpuq.api.caller import Caller
from tpuq.api.handlers import Api
from tpuq.settings import Settings
from tpuq.state.db import Database
from tpuq.web import actions, auth, live, pages
from tpuq.web.data import Refused
from tpuq.web.metrics import TpuqCollector

HERE = Path(__file__).resolve().parent
FORECAST_TTL_S = 5.0  # the start forecast is shared by the requests of a few seconds


class Unauthorized(Exception):
    """No session (or one whose token was revoked): the sign-in form, status 401."""


class Web:
    """What every route needs: the handlers, sessions, templates and the collector."""

    def __init__(self, settings: Settings, db: Database, listen_host: str) -> None:
        self.settings = settings
        self.db = db
        self.listen_host = listen_host
        self.api = Api(settings, db, here=settings.host, starts=self._cached_starts)
        self.sessions = auth.Sessions(settings)
        self.throttle = auth.Throttle()
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters.update(when=_when, ago=_ago, dur=_dur)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(TpuqCollector(db, settings.host_stale_s))
        self._starts: tuple[float, Mapping[int, Any]] = (float("-inf"), {})

    def _cached_starts(self) -> Mapping[int, Any]:
        at, value = self._starts
        if time.monotonic() - at > FORECAST_TTL_S:
            from tpuq.scheduler.loop import expected_starts

            value = expected_starts(self.db, self.settings)
            self._starts = (time.monotonic(), value)
        return value

    # ---- who ----------------------------------------------------------------------------
    def session(self, request: Request) -> auth.Session | None:
        return self.sessions.read(request)

    def caller(self, request: Request) -> Caller:
        """The signed-in person, or Unauthorized."""
        who = auth.caller_of(self.db, self.session(request))
        if who is None:
            raise Unauthorized()
        return who

    def render(self, request: Request, template: str, status: int = 200,
               **context: Any) -> HTMLResponse:
        session = self.session(request)
        return self.templates.TemplateResponse(
            request, template, {"session": session, "csrf": session.csrf if session else "",
                                "csrf_field": auth.CSRF_FIELD, **context}, status_code=status)

    # ---- /metrics ------------------------------------------------------------------------
    def metrics(self, request: Request) -> Response:
        token = self.settings.web_metrics_token
        if token:
            sent = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(sent, f"Bearer {token}".encode()):
                return PlainTextResponse("metrics need TPUQ_WEB_METRICS_TOKEN as a bearer "
                                         "token\n", status_code=401)
        elif not loopback(self.listen_host):
            return PlainTextResponse("metrics are open only while tpuq web listens on loopback: "
                                     "set TPUQ_WEB_METRICS_TOKEN\n", status_code=403)
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_app(settings: Settings, db: Database, listen_host: str = "127.0.0.1") -> Starlette:
    web = Web(settings, db, listen_host)

    def bind(fn: Callable[[Web, Request], Response]) -> Callable[[Request], Response]:
        return lambda request: fn(web, request)

    routes = [
        Route("/login", bind(pages.login_form), methods=["GET"]),
        Route("/login", bind(pages.login), methods=["POST"]),
        Route("/logout", bind(pages.logout), methods=["POST"]),
        Route("/metrics", bind(Web.metrics), methods=["GET"]),
        Route("/", bind(pages.overview)),
        Route("/fragments/queue", bind(pages.queue_fragment)),
        Route("/chips", bind(pages.chips)),
        Route("/fragments/chips", bind(pages.chips_fragment)),
        Route("/teams", bind(pages.teams)),
        Route("/timeline", bind(pages.timeline)),
        Route("/history", bind(pages.history)),
        Route("/jobs/{id:int}", bind(pages.job)),
        Route("/jobs/{id:int}/log", bind(live.log_stream)),
        Route("/jobs/{id:int}/{action:str}", bind(actions.job_action), methods=["POST"]),
        Route("/hosts/{host:str}/{action:str}", bind(actions.host_action), methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    def unauthorized(request: Request, exc: Exception) -> Response:
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            return web.render(request, "login.html", 401, error=None, next=request.url.path)
        return PlainTextResponse("sign in first (/login)\n", status_code=401)

    def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return web.render(request, "error.html", exc.status, message=exc.message)

    app = Starlette(routes=routes, exception_handlers={Unauthorized: unauthorized,
                                                       Refused: refused})
    return SecurityHeaders(app)  # type: ignore[return-value]


# no script, style, font or connection from anywhere but this site; never in a frame
HEADERS = [(b"content-security-policy", b"default-src 'self'; style-src 'self' 'unsafe-inline'; "
            b"img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
           (b"x-frame-options", b"DENY"), (b"referrer-policy", b"same-origin"),
           (b"x-content-type-options", b"nosniff")]


class SecurityHeaders:
    """Adds HEADERS to every response (plain ASGI: streaming responses stay streams)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _ago(t: float | None, now: float | None = None) -> str:
    return "-" if t is None else _dur((now or time.time()) - t)


def _dur(seconds: float) -> str:
    from tpuq.spec import show_duration

    return show_duration(max(0.0, seconds))


def serve(settings: Settings, db: Database, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(create_app(settings, db, host), host=host, port=port, log_level="warning",
                proxy_headers=False, server_header=False)
