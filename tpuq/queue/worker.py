"""The agent's Celery worker, run on a thread inside the agent process.

The agent keeps the main thread and its own two-stage signal handling; the worker only
consumes this host's queue and the control queue, with a threads pool (never prefork:
it forks, and JAX must never be forked).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from celery.worker.consumer import Consumer

from tpuq.queue import tasks
from tpuq.queue.app import app, control_queue_name, host_queue

log = logging.getLogger("tpuq.queue")


RECONNECT_EVERY_S = 1.0


READY_WAIT_S = 10.0  # a stop waits this long for a worker still starting up
TIMERS_WAIT_S = 2.0  # and this long for its event loop to drop its timers


class HostConsumer(Consumer):  # type: ignore[misc]  # celery is untyped: Consumer is Any
    """Celery's consumer, retrying a lost broker every second, and saying when it is
    ready.

    Celery reconnects through kombu's `ensure_connection` with its built-in waits (2 s,
    then 2 s longer each time, up to 30 s), which no setting reaches (kombu#735): after
    a one-minute Redis outage the worker stayed deaf for up to 30 s more, missing rings
    and cancel broadcasts. A reconnect attempt a second is nothing for Redis.
    """

    ready: threading.Event | None = None  # set by HostWorker, per worker

    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(
            conn.ensure_connection, interval_start=RECONNECT_EVERY_S, interval_step=0,
            interval_max=RECONNECT_EVERY_S)
        return super().ensure_connected(conn)

    def on_ready(self) -> None:
        super().on_ready()
        if self.ready is not None:
            self.ready.set()


class _StoppedWhileStarting(logging.Filter):
    """Once the agent stops its worker, Celery's "Unrecoverable error" from a start-up
    that the stop cut short (a connection closed under it) is no error: one line, no
    traceback. Before the stop, it is logged as Celery logs it."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.stopping and record.levelno >= logging.ERROR and \
                str(record.msg).startswith("Unrecoverable error"):
            error = record.exc_info[1] if record.exc_info else None
            record.msg, record.args = "stopped while still starting (%r)", (error,)
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info = record.exc_text = None
        return True


def _warnings_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


_QUIET = _warnings_only


class HostWorker:
    def __init__(self, host: tasks.Host, name: str, concurrency: int) -> None:
        tasks.bind(host)
        # two lines per task ("Task tpuq.ring[...] received", "... succeeded in 9e-05s:
        # None") drowned the agent's own lines about jobs; failures still log (ERROR).
        # A filter, not a level: the worker sets its loggers' levels when it starts.
        for logger in ("celery.app.trace", "celery.worker.strategy"):
            chatty = logging.getLogger(logger)
            if _QUIET not in chatty.filters:
                chatty.addFilter(_QUIET)
        self.ready = threading.Event()
        consumer = type("Consumer", (HostConsumer,), {"ready": self.ready})
        self.controller: Any = app.WorkController(
            hostname=f"tpuq@{name}", pool_cls="threads", concurrency=concurrency,
            queues=[host_queue(name), control_queue_name(app)], without_mingle=True,
            without_gossip=True, loglevel="WARNING", consumer_cls=consumer,
        )
        self.thread = threading.Thread(target=self._run, name="celery-worker", daemon=True)
        self.quiet_stop = _StoppedWhileStarting()
        logging.getLogger("celery.worker").addFilter(self.quiet_stop)

    def start(self) -> HostWorker:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.controller.start()
        except Exception:  # noqa: BLE001
            log.exception("celery worker stopped")

    def alive(self) -> bool:
        """Still consuming: its thread runs (an admin's `celery control shutdown`, or a
        crash, ends it; the agent then starts another)."""
        return self.thread.is_alive()

    def stop(self) -> None:
        """Stop consuming. A worker still starting up is given READY_WAIT_S to finish
        first: stopped halfway, Celery's start fails under it (a closed connection)."""
        if self.thread.is_alive():
            self.ready.wait(READY_WAIT_S)
        self.quiet_stop.stopping = True
        self._drop_timers()
        try:
            self.controller.stop(in_sighandler=False)
        except Exception:  # noqa: BLE001 - stopping must not raise during shutdown
            log.exception("stopping the celery worker")
        self.thread.join(10)
        logging.getLogger("celery.worker").removeFilter(self.quiet_stop)
        tasks.bind(None)

    def _drop_timers(self) -> None:
        """Empty the event loop's timers on the loop's own thread before the stop closes
        the connection from this one. Celery stops a worker from a signal handler on the
        loop's thread; the agent stops it from its main thread, and kombu's Redis timer
        (`maybe_refresh_binding_expiry`, every second) iterates the channels that the
        close removes: "Error in timer: Set changed size during iteration", with a
        traceback, in a clean stop. Once this ran, no timer fires again on that loop."""
        hub = getattr(self.controller, "hub", None)
        if hub is None or not self.thread.is_alive():
            return
        dropped = threading.Event()

        def drop() -> None:
            hub.timer.clear()
            dropped.set()

        hub.call_soon(drop)
        dropped.wait(TIMERS_WAIT_S)
