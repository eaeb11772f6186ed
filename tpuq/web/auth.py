"""Who is asking: sign-in (a token an admin issued, or a PostgreSQL role's password),
the session cookie, CSRF tokens, and the Caller the handlers authorize.

The dashboard decides nothing about what a person may do: it finds out who they are and
hands the request to the same handlers as the CLI (tpuq/api/handlers.py) with that
Caller. Whether they are an admin is asked of the database on every request, as the
CLI does, so taking someone's admin away takes effect at once.
"""

from __future__ import annotations

import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.datastructures import FormData
from starlette.requests import Request

from tpuq.api.caller import Caller
from tpuq.errors import TpuqError
from tpuq.settings import Settings
from tpuq.state import admins, webtokens
from tpuq.state.db import Database

COOKIE = "tpuq_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")  # what `tpuq user add` makes (roles.py)
FAILURES_ALLOWED, FAILURE_WINDOW_S = 10, 300.0  # sign-in failures per client address


@dataclass(frozen=True)
class Session:
    user: str
    csrf: str
    token: str | None  # the digest of the token signed in with (checked on every request)


class Sessions:
    """Signed, expiring session cookies (itsdangerous): nothing is stored server-side."""

    def __init__(self, settings: Settings) -> None:
        secret = settings.web_secret or secrets.token_urlsafe(32)
        self._signer = URLSafeTimedSerializer(secret, salt="tpuq-web-session")
        self.max_age = int(settings.web_session_h * 3600)

    def make(self, user: str, token_digest: str | None) -> tuple[str, Session]:
        session = Session(user, secrets.token_urlsafe(24), token_digest)
        value = self._signer.dumps({"u": user, "x": session.csrf, "t": token_digest})
        return value, session

    def read(self, request: Request) -> Session | None:
        raw = request.cookies.get(COOKIE)
        if not raw:
            return None
        try:
            data: Any = self._signer.loads(raw, max_age=self.max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("u"), str):
            return None
        return Session(data["u"], str(data.get("x") or ""), data.get("t"))


def caller_of(db: Database, session: Session | None) -> Caller | None:
    """The Caller for a session: None when its token was revoked or expired meanwhile."""
    if session is None:
        return None
    with db.read() as s:
        if session.token is not None and not webtokens.valid_digest(s, session.token):
            return None
        return Caller(name=session.user, admin=admins.is_admin(s, session.user))


def check_token(db: Database, token: str) -> str | None:
    """The user a sign-in token belongs to, or None."""
    token = token.strip()
    if not token.startswith(webtokens.PREFIX) or len(token) > 200:
        return None
    with db.read() as s:
        return webtokens.user_of(s, token)


class PasswordsNotChecked(TpuqError):
    """The database server lets anyone in as this role whatever the password (its
    pg_hba.conf says `trust`): a password proves nothing there."""


def check_password(settings: Settings, user: str, password: str) -> bool:
    """Does PostgreSQL let `user` in with `password`? (It checks, not us: a connection
    to the deployment's database as that role.) Never on an embedded deployment.

    First a connection with a password nobody has: a server that takes it does not
    check passwords for this role (`trust`), and PasswordsNotChecked says so."""
    if not settings.database_url.startswith("postgresql") or not _ROLE.match(user):
        return False
    if _connects(settings, user, "not-" + secrets.token_urlsafe(24)):
        raise PasswordsNotChecked(f"the database server lets {user} in without a password "
                                  "(trust): sign in with a token from `tpuq web token add`")
    return _connects(settings, user, password)


def _connects(settings: Settings, user: str, password: str) -> bool:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(settings.database_url)
    try:
        with psycopg.connect(host=url.host or "localhost", port=url.port or 5432,
                             dbname=url.database, user=user, password=password,
                             connect_timeout=5) as conn:
            row = conn.execute("SELECT current_user").fetchone()
    except psycopg.Error:
        return False
    return row is not None and row[0] == user


def read_form(request: Request) -> FormData:
    """The posted form, from a route that runs in a worker thread."""
    import anyio.from_thread

    async def form() -> FormData:
        return await request.form()

    return anyio.from_thread.run(form)


def csrf_ok(session: Session, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(session.csrf, sent or "")


def same_origin(request: Request) -> bool:
    """A form posted from this dashboard's own pages (browsers send Origin on POST);
    a request without Origin or Referer (a script) is judged by its CSRF token alone."""
    sent = request.headers.get("origin") or request.headers.get("referer")
    if not sent:
        return True
    here = request.headers.get("host", "")
    return urlsplit(sent).netloc == here


class Throttle:
    """Sign-in failures per client address: after FAILURES_ALLOWED within the window,
    refuse until the oldest failure ages out (guessing passwords or tokens is slow)."""

    def __init__(self) -> None:
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def blocked(self, who: str) -> bool:
        with self._lock:
            recent = [t for t in self._failures.get(who, []) if time.monotonic() - t < FAILURE_WINDOW_S]
            self._failures[who] = recent
            return len(recent) >= FAILURES_ALLOWED

    def failed(self, who: str) -> None:
        with self._lock:
            self._failures.setdefault(who, []).append(time.monotonic())
