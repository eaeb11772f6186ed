"""Ringing: publish doorbells. Failures are logged, never fatal: agents also poll."""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("tpuq.queue")


def _app() -> Any:
    from tpuq.queue.app import app

    return app


def ring_host(host: str, job_id: int, attempt: int) -> bool:
    from tpuq.queue.app import RUN_TASK, host_queue

    try:
        _app().send_task(RUN_TASK, args=(job_id, attempt), queue=host_queue(host))
        return True
    except Exception as e:  # noqa: BLE001 - the assignment is committed; the host polls
        log.warning("doorbell for job %s on %s not delivered (%s); the host will poll",
                    job_id, host, e)
        return False


def ring_scheduler(cfg: Any = None) -> bool:
    """Wake every agent: the leader schedules, hosts check their jobs' stop requests."""
    from tpuq.queue.app import RING_TASK

    return _broadcast(RING_TASK)


def ring_leader() -> bool:
    """Wake only the scheduler leader (chips were freed): the other agents drop it."""
    from tpuq.queue.app import SCHEDULE_TASK

    return _broadcast(SCHEDULE_TASK)


def _broadcast(task: str) -> bool:
    from tpuq.queue.app import CONTROL_QUEUE, control_queue

    try:
        # to the fanout exchange itself, declared so the transport knows it fans out:
        # every agent's private queue gets a copy
        exchange = control_queue().exchange
        _app().send_task(task, exchange=exchange, routing_key=CONTROL_QUEUE, declare=[exchange])
        return True
    except Exception as e:  # noqa: BLE001
        log.warning("%s not delivered (%s); agents will poll", task, e)
        return False


class Ringer:
    """An agent's rings, published from one background thread.

    The caller (a local submit's answer, a supervisor that just freed chips) never waits
    on the broker: what the ring announces is committed already, and agents poll if it
    is lost. Rings asked for while one is being published go out as one, so a broker
    outage costs one blocked thread, not one per ring.
    """

    ALL, LEADER = "all", "leader"

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._wanted: set[str] = set()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="ringer", daemon=True)

    def start(self) -> Ringer:
        self._thread.start()
        return self

    def ring_all(self) -> None:
        self._want(self.ALL)

    def ring_leader(self) -> None:
        self._want(self.LEADER)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(10)

    def _want(self, kind: str) -> None:
        with self._cond:
            self._wanted.add(kind)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._stopped:
                    self._cond.wait()
                wanted, self._wanted = self._wanted, set()
                stopped = self._stopped
            if wanted:  # asked for before stop() too: an agent's last requeues go out
                try:  # ringing every agent wakes the leader too
                    ring_scheduler() if self.ALL in wanted else ring_leader()
                except Exception:  # noqa: BLE001 - a bug here must not silence later rings
                    log.exception("ringing failed")
            if stopped:
                return
