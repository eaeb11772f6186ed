"""The Starlette application: routes, the sign-in gate, errors as pages; serving it.

Every route but /login, /metrics and /static needs a session (401 and the sign-in
form without one). Every POST needs the session's CSRF token and, from a browser, this
site as its Origin (403 without). What a signed-in person may see or do is the
handlers' answer (tpuq/api/handlers.py), never this module's.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tpuq.settings import Settings
from tpuq.state.db import Database
from tpuq.web import actions, live, pages
from tpuq.web.data import Refused
from tpuq.web.site import HERE, Unauthorized, Web


def create_app(settings: Settings, db: Database, listen_host: str = "127.0.0.1") -> ASGIApp:
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
    return SecurityHeaders(app)


# no script, style, font or connection from anywhere but this site; never in a frame
HEADERS = [(b"content-security-policy", b"default-src 'self'; style-src 'self' 'unsafe-inline'; "
            b"img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
           (b"x-frame-options", b"DENY"), (b"referrer-policy", b"same-origin"),
           (b"x-content-type-options", b"nosniff")]


class SecurityHeaders:
    """Adds HEADERS to every response (plain ASGI: streaming responses stay streams)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def serve(settings: Settings, db: Database, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(create_app(settings, db, host), host=host, port=port, log_level="warning",
                proxy_headers=False, server_header=False)
