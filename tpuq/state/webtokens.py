"""Sign-in tokens for the dashboard: issued by an admin for one user, kept as a SHA-256
digest (the token is shown once), revocable, optionally expiring."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.db import rows_changed
from tpuq.state.models import WebToken

PREFIX = "tpuq_"  # what a tpuq token looks like in a secret scanner's eyes


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue(s: Session, user: str, by: str, *, label: str | None = None,
          valid_s: float | None = None) -> tuple[int, str]:
    """A new token for `user`: (its id, the token). Only its digest is stored."""
    token = PREFIX + secrets.token_urlsafe(32)
    row = s.execute(insert(WebToken).values(
        user=user, digest=digest(token), label=label, created_at=db_now(), created_by=by,
        expires_at=None if valid_s is None else db_now() + valid_s
    ).returning(WebToken.id)).scalar_one()
    return int(row), token


def user_of(s: Session, token: str) -> str | None:
    """Whose token this is, while it is neither revoked nor expired."""
    row = s.execute(select(WebToken.user).where(
        WebToken.digest == digest(token), WebToken.revoked_at.is_(None),
        (WebToken.expires_at.is_(None)) | (WebToken.expires_at > db_now()))).first()
    return None if row is None else str(row.user)


def revoke(s: Session, token_id: int) -> bool:
    return bool(rows_changed(s.execute(update(WebToken).where(
        WebToken.id == token_id, WebToken.revoked_at.is_(None)).values(revoked_at=db_now()))))


def listed(s: Session) -> list[Any]:
    return list(s.execute(select(WebToken.id, WebToken.user, WebToken.label,
                                 WebToken.created_at, WebToken.created_by, WebToken.expires_at,
                                 WebToken.revoked_at).order_by(WebToken.id)))


def valid_digest(s: Session, token_digest: str) -> bool:
    """Is the token with this digest still good (a session signed in with it lives on)?"""
    return s.execute(select(WebToken.id).where(
        WebToken.digest == token_digest, WebToken.revoked_at.is_(None),
        (WebToken.expires_at.is_(None)) | (WebToken.expires_at > db_now()))).first() is not None
