"""What every route needs: the handlers, sessions, templates, the collector; who is
asking (Unauthorized without a session); a posted form once its CSRF token is right."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.templating import Jinja2Templates

from tpuq.api.caller import Caller
from tpuq.api.handlers import Api
from tpuq.errors import Failure, TpuqError
from tpuq.jobjson import epoch
from tpuq.settings import Settings
from tpuq.state.db import Database
from tpuq.web import auth
from tpuq.web.data import Refused
from tpuq.web.metrics import TpuqCollector

log = logging.getLogger("tpuq.web")
HERE = Path(__file__).resolve().parent
FORECAST_TTL_S = 5.0  # the start forecast is shared by the requests of a few seconds


class Unauthorized(TpuqError):
    """No session (or one whose token was revoked): the sign-in form, status 401."""

    KIND = Failure.FORBIDDEN


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
        self.templates.env.filters.update(when=_when, ago=_ago, dur=_dur, epoch=epoch)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(TpuqCollector(db, settings.host_stale_s))
        self._starts: tuple[float, Mapping[int, Any]] = (float("-inf"), {})
        self._forecasting = threading.Lock()

    def _cached_starts(self) -> Mapping[int, Any]:
        """The latest start forecast, never waited for: a page shows what the last one
        said (nothing yet, just after start) while a thread makes a fresh one once it
        is older than FORECAST_TTL_S (a forecast of 10,000 queued jobs takes seconds)."""
        at, value = self._starts
        if time.monotonic() - at > FORECAST_TTL_S and self._forecasting.acquire(blocking=False):
            threading.Thread(target=self._forecast, name="forecast", daemon=True).start()
        return value

    def _forecast(self) -> None:
        from tpuq.scheduler.passes import expected_starts

        try:
            self._starts = (time.monotonic(), expected_starts(self.db, self.settings))
        except Exception as e:  # noqa: BLE001 - the next request tries again
            log.warning("start forecast failed: %s", e)
        finally:
            self._forecasting.release()

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

    def checked_form(self, request: Request) -> tuple[Caller, FormData]:
        """The caller and the posted form, once the CSRF token and origin are right."""
        session = self.session(request)
        caller = auth.caller_of(self.db, session)
        if session is None or caller is None:
            raise Unauthorized()
        form = auth.read_form(request)
        sent = request.headers.get(auth.CSRF_HEADER) or str(form.get(auth.CSRF_FIELD) or "")
        if not auth.csrf_ok(session, sent) or not auth.same_origin(request):
            raise Refused(403, "this form is stale or not from this site: reload the page "
                               "and try again")
        return caller, form


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _when(t: float | str | None) -> str:
    """Epoch seconds, or a job object's ISO time, as local time."""
    t = epoch(t)
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _ago(t: float | str | None, now: float | None = None) -> str:
    t = epoch(t)
    return "-" if t is None else _dur((now or time.time()) - t)


def _dur(seconds: float) -> str:
    from tpuq.spec import show_duration

    return show_duration(max(0.0, seconds))


