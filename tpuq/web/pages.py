"""The pages (and the fragments they refresh every few seconds), and signing in and out.

Each page asks `data` as the signed-in Caller and renders what comes back.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tpuq.state import webtokens
from tpuq.web import auth, data

if TYPE_CHECKING:
    from tpuq.web.site import Web

HISTORY_PAGE = 200  # rows of history shown at once
HISTORY_DAYS = (1, 7, 30, 90, 365)
TIMELINE_SPANS = ((1, "hour"), (24, "day"), (168, "7 days"))  # hours, in words


def _json(value: Any) -> str:
    """For a <script type="application/json"> block: no `</` can end the block early."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


# ---- signing in ------------------------------------------------------------------------------

def login_form(web: Web, request: Request) -> Response:
    return web.render(request, "login.html", error=None, next=_next(request.query_params.get("next")))


def _next(path: str | None) -> str:
    """Only a path of this site (never `//elsewhere` or a URL): no open redirect."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def login(web: Web, request: Request) -> Response:
    form = auth.read_form(request)
    client = request.client.host if request.client else "?"
    target = _next(str(form.get("next") or "/"))
    if not auth.same_origin(request):
        return web.render(request, "login.html", 403, error="sign in from this site's own page",
                          next=target)
    if web.throttle.blocked(client):
        return web.render(request, "login.html", 429, next=target,
                          error="too many failed sign-ins from here: wait a few minutes")
    token = str(form.get("token") or "")
    user = str(form.get("user") or "").strip()
    password = str(form.get("password") or "")
    who, digest = None, None
    if token:
        who = auth.check_token(web.db, token)
        digest = webtokens.digest(token.strip()) if who else None
    elif user and password:
        try:
            who = user if auth.check_password(web.settings, user, password) else None
        except auth.PasswordsNotChecked as e:
            return web.render(request, "login.html", 401, next=target, error=str(e))
    if who is None:
        web.throttle.failed(client)
        return web.render(request, "login.html", 401, next=target,
                          error="that token or password was not accepted")
    value, _ = web.sessions.make(who, digest)
    response = RedirectResponse(target, status_code=303)
    # Secure when the browser speaks HTTPS, to us or to a TLS proxy in front (trusting
    # the proxy's header here can only make the cookie stricter)
    https = "https" in (request.url.scheme, request.headers.get("x-forwarded-proto"))
    response.set_cookie(auth.COOKIE, value, max_age=web.sessions.max_age, httponly=True,
                        samesite="strict", secure=https)
    return response


def logout(web: Web, request: Request) -> Response:
    web.checked_form(request)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(auth.COOKIE)
    return response


# ---- the queue and hosts -------------------------------------------------------------------------

def overview(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    q = data.queue(web.api, caller)
    return web.render(request, "overview.html", caller=caller, q=q, free_json=_json(q["free"]))


def queue_fragment(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    return web.render(request, "_queue.html", caller=caller, q=data.queue(web.api, caller))


def chips(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    q = data.queue(web.api, caller)
    return web.render(request, "chips.html", caller=caller, now=q["now"],
                      hosts=data.chip_map(web.db, q["hosts"]),
                      said=request.query_params.get("said"))


def chips_fragment(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    q = data.queue(web.api, caller)
    return web.render(request, "_chips.html", caller=caller, now=q["now"],
                      hosts=data.chip_map(web.db, q["hosts"]))


# ---- teams, timeline, history, one job -----------------------------------------------------------

def teams(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    rows = data.teams(web.api, caller, web.db)
    charts = {r["team"]: {"series": r.get("burn_down"), "budget": r.get("budget_chip_hours"),
                          "resets": (r.get("budget_resets_at") or 0) * 1000.0}
              for r in rows if r.get("burn_down")}
    return web.render(request, "teams.html", caller=caller, teams=rows, charts_json=_json(charts))


def timeline(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    spans = dict(TIMELINE_SPANS)
    hours = request.query_params.get("hours", "168")
    span_h = int(hours) if hours.isdigit() and int(hours) in spans else 168
    g = data.gantt(web.db, time.time(), span_h * 3600.0)
    return web.render(request, "timeline.html", caller=caller, gantt=g, gantt_json=_json(g),
                      spans=TIMELINE_SPANS, span_h=span_h, span_words=spans[span_h])


def history(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    p = request.query_params
    try:
        days = float(p.get("days") or 7)
        page = max(0, int(p.get("page") or 0))
    except ValueError:
        days, page = 7.0, 0
    days = min(max(days, 0.01), 3650.0)
    rows, more = data.history(web.api, caller, days=days, user=p.get("user"),
                              team=p.get("team"), state=p.get("state") or None, text=p.get("q"),
                              page=page, size=HISTORY_PAGE)
    return web.render(request, "history.html", caller=caller, rows=rows, page=page, more=more,
                      days=days, day_choices=HISTORY_DAYS, params=p)


def job(web: Web, request: Request) -> Response:
    caller = web.caller(request)
    job_id = int(request.path_params["id"])
    j = data.job(web.api, caller, job_id)
    return web.render(request, "job.html", caller=caller, job=j, owns=caller.owns(j["owner"]),
                      said=request.query_params.get("said"), now=time.time())
