"""Database outages: which errors are a lost server (wait and retry) and how to wait.

A PostgreSQL restart must not end a supervised job or lose its outcome: the agent keeps
the job running, retries what it has to write, and goes on once the server is back.
An error that is not a lost connection (a constraint, a bug) is raised at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import exc

from tpuq.protocol import Failure

log = logging.getLogger("tpuq.agent")
T = TypeVar("T")
FIRST_WAIT_S = 0.1
MAX_WAIT_S = 2.0


# Called when a write fails because the disk is full, before it is tried again: the
# agent frees the room it keeps for this (agent/reserve.py).
disk_full_hook: Callable[[], None] | None = None


def is_outage(e: BaseException) -> bool:
    """The server went away or cannot be reached (the pool reconnects on the next use),
    or its disk is full (it may have room again soon)."""
    if isinstance(e, exc.DBAPIError) and e.connection_invalidated:
        return True
    return isinstance(e, (exc.OperationalError, exc.InterfaceError, exc.TimeoutError))


def is_disk_full(e: BaseException) -> bool:
    text = str(getattr(e, "orig", e)).lower()
    return "disk is full" in text or "no space left" in text or \
        getattr(getattr(e, "orig", None), "sqlstate", None) == "53100"


# SQLSTATE classes a request can be refused with (PostgreSQL; SQLite raises no such codes)
_FORBIDDEN = {"42501"}  # insufficient_privilege, also a row-level security refusal
_REFUSED = {"23514", "23502", "22001", "22003"}  # check, not null, too long, out of range


def refusal(e: BaseException) -> Failure | None:
    """How a request that met this database error was refused, or None for a bug."""
    if is_outage(e):
        return Failure.UNAVAILABLE
    code = getattr(getattr(e, "orig", None), "sqlstate", None)
    if code in _FORBIDDEN:
        return Failure.FORBIDDEN
    if code in _REFUSED or isinstance(e, exc.IntegrityError) and "CHECK" in str(e):
        return Failure.REFUSED
    return None


# What the server or driver says (libpq, SQLite), and what it means for the operator.
# Each kind is its own line: an outage is not a missing schema, and a missing database
# is not an outage.
_KINDS = (
    (("connection refused",), "connection refused (is the server running and listening there?)"),
    (("could not translate host name", "name or service not known", "nodename nor servname"),
     "unknown host name (check the host in TPUQ_DATABASE_URL)"),
    (("timeout expired", "timed out"), "no answer (a firewall, or the server is down)"),
    (("password authentication failed", "authentication failed", "no password supplied"),
     "authentication failed (check the user and password in TPUQ_DATABASE_URL)"),
    (("role", "does not exist"), "no such user on the server (check TPUQ_DATABASE_URL, or "
                                 "create the role)"),
    (("database", "does not exist"), "no such database on the server (create it, e.g. "
                                     "`createdb NAME`, or fix TPUQ_DATABASE_URL)"),
    (("unable to open database file",), "cannot open the database file (does its directory "
                                        "exist and may you write there?)"),
    (("file is not a database",), "the file is not a database (a damaged or foreign file?)"),
)


def kind_of(e: BaseException) -> str | None:
    """What a connection error means, in words, or None when it is something else."""
    text = str(getattr(e, "orig", e)).lower()
    for needles, meaning in _KINDS:
        if all(n in text for n in needles):
            return meaning
    return None


def describe(e: BaseException, url: str | None = None) -> str:
    """A database error in one line, for people: what it means, else the driver's first
    line (never SQL)."""
    where = f"database {url}" if url else "the database"
    meaning = kind_of(e)
    if meaning is not None:
        return f"cannot use {where}: {meaning}"
    first = (str(getattr(e, "orig", e)).strip().splitlines() or ["?"])[0]
    return f"cannot use {where}: {first}"


def until_written(fn: Callable[[], T], what: str, *, max_wait_s: float = MAX_WAIT_S,
                  give_up: threading.Event | None = None) -> T:
    """Run `fn` (one whole transaction) until it succeeds, through any database outage.

    Waits between tries grow from 0.1 s to `max_wait_s`. `give_up` (e.g. the agent's
    second Ctrl-C) ends the retrying by raising the last error.
    """
    wait = FIRST_WAIT_S
    failures = 0
    waiter = give_up or threading.Event()
    while True:
        try:
            result = fn()
        except Exception as e:
            if not is_outage(e):
                raise
            failures += 1
            if is_disk_full(e) and disk_full_hook is not None:
                disk_full_hook()
            if failures == 1 or failures % 10 == 0:
                log.warning("database unavailable while %s (try %d): %s; retrying",
                            what, failures, str(e).splitlines()[0][:200])
            if waiter.wait(wait):
                raise
            wait = min(wait * 2, max_wait_s)
            continue
        if failures:
            log.info("database back: %s done after %d tries", what, failures + 1)
        return result
