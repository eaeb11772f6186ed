"""Ringing: publish doorbells. Failures are logged, never fatal: agents also poll."""

from __future__ import annotations

import logging
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
    from tpuq.queue.app import CONTROL_QUEUE, RING_TASK, control_queue

    try:
        # to the fanout exchange itself, declared so the transport knows it fans out:
        # every agent's private queue gets a copy
        exchange = control_queue().exchange
        _app().send_task(RING_TASK, exchange=exchange, routing_key=CONTROL_QUEUE,
                         declare=[exchange])
        return True
    except Exception as e:  # noqa: BLE001
        log.warning("ring not delivered (%s); agents will poll", e)
        return False
