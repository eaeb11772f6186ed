"""Wake-ups through the database: what a machine with no agent (a laptop, a login VM)
rings after it changed the queue, and what every agent listens for.

PostgreSQL's NOTIFY reaches every session that LISTENs on the channel, in the database
where it was sent (so only this deployment's agents), and needs no privilege: a user's
own login role rings, and needs no broker account that could publish into Celery's
queues or its remote-control channel. A wake-up only says "look at the database now";
whatever it asks is decided there. A lost one costs a poll (TPUQ_POLL_S).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy import text

from tpuq.state.db import Database
from tpuq.state.outage import is_outage
from tpuq.state.pgconnect import WAKE_CHANNEL

log = logging.getLogger("tpuq.state")
CHANNEL = WAKE_CHANNEL
RETRY_S = 1.0  # a lost listening connection is made again this often
WAIT_S = 1.0  # how long one wait for wake-ups lasts before it checks for a stop


def ring(db: Database) -> bool:
    """Wake every agent of the deployment; False when there is nothing to ring (SQLite:
    one host, whose socket is the doorbell) or the database is away (agents poll)."""
    if db.is_sqlite:
        return False
    try:
        with db.single() as s:
            s.execute(text(f"NOTIFY {CHANNEL}"))
        return True
    except Exception as e:  # noqa: BLE001 - what was asked is committed; agents poll
        log.warning("wake-up not delivered (%s); agents will poll", type(e).__name__)
        return False


class Listener:
    """Calls `on_wake` for each wake-up rung in the database, from a thread of its own,
    listening again after a lost connection (a database restart)."""

    def __init__(self, db: Database, on_wake: Callable[[], None]) -> None:
        self.db = db
        self.on_wake = on_wake
        self._stop = threading.Event()
        self._lost = False  # the database went away since it last listened
        self._thread = threading.Thread(target=self._run, name="wake-listener", daemon=True)

    def start(self) -> Listener:
        if not self.db.is_sqlite:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(WAIT_S + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as e:  # noqa: BLE001 - listen again; agents poll meanwhile
                if _lost_database(e) and not self._lost:
                    # told once an outage: this thread may be the first to meet it
                    log.warning("wake-ups: database unavailable (%s); polling until it is "
                                "back", str(e).splitlines()[0][:200])
                    self._lost = True
                else:
                    log.debug("listening for wake-ups: %s", e)
                self._stop.wait(RETRY_S)

    def _listen(self) -> None:
        raw = self.db.engine.raw_connection()
        try:
            conn = raw.driver_connection
            assert conn is not None
            conn.autocommit = True
            conn.execute(f"LISTEN {CHANNEL}")
            if self._lost:
                log.info("wake-ups: database back, listening again")
                self._lost = False
            while not self._stop.is_set():
                for _ in conn.notifies(timeout=WAIT_S):
                    self.on_wake()
                    if self._stop.is_set():
                        break
        finally:
            raw.invalidate()  # it listens and autocommits: never back into the pool


def _lost_database(e: BaseException) -> bool:
    """An outage as SQLAlchemy raises it (a connection that cannot be made), or as
    psycopg raises it on the listening connection itself (the server went away)."""
    import psycopg  # this thread runs on PostgreSQL alone

    return is_outage(e) or isinstance(e, psycopg.OperationalError)
