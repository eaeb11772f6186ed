"""The agent's Celery worker, run on a thread inside the agent process.

The agent keeps the main thread and its own two-stage signal handling; the worker only
consumes this host's queue and the control queue, with a threads pool (never prefork:
it forks, and JAX must never be forked).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from tpuq.queue import tasks
from tpuq.queue.app import app, control_queue_name, host_queue

if TYPE_CHECKING:
    from tpuq.agent.main import Agent

log = logging.getLogger("tpuq.queue")


class HostWorker:
    def __init__(self, agent: Agent, concurrency: int) -> None:
        tasks.bind(agent)
        self.controller: Any = app.WorkController(
            hostname=f"tpuq@{agent.name}", pool_cls="threads", concurrency=concurrency,
            queues=[host_queue(agent.name), control_queue_name(app)], without_mingle=True,
            without_gossip=True, loglevel="WARNING",
        )
        self.thread = threading.Thread(target=self._run, name="celery-worker", daemon=True)

    def start(self) -> HostWorker:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.controller.start()
        except Exception:  # noqa: BLE001
            log.exception("celery worker stopped")

    def stop(self) -> None:
        try:
            self.controller.stop(in_sighandler=False)
        except Exception:  # noqa: BLE001 - stopping must not raise during shutdown
            log.exception("stopping the celery worker")
        self.thread.join(10)
        tasks.bind(None)
