"""Tasks and remote-control commands, run inside an agent's Celery worker.

They reach the agent of this process through `bound_agent()`; the worker is started by
the agent itself (tpuq/queue/worker.py), so there is exactly one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.worker.control import inspect_command

if TYPE_CHECKING:
    from tpuq.agent.main import Agent

log = logging.getLogger("tpuq.queue")
_agent: Agent | None = None


def bind(agent: Agent | None) -> None:
    global _agent
    _agent = agent


def bound_agent() -> Agent:
    if _agent is None:
        raise RuntimeError("no tpuq agent in this process")
    return _agent


def run(job_id: int, attempt: int) -> str:
    """Start the attempt if it is still assigned here; stay active while it runs.

    If the host's own poll started it first (the message came late), stay active with
    it all the same: `celery inspect active` lists every running attempt either way.
    """
    executor = bound_agent().executor
    sup = executor.ring(int(job_id), int(attempt)) or executor.supervisor(int(job_id), int(attempt))
    if sup is None:
        return "stale or duplicate doorbell"
    sup.join()
    return sup.ending.outcome.value if sup.ending else "fenced"


def ring() -> None:
    """Something changed in the database: schedule now, check stop requests now."""
    if _agent is not None:
        _agent.wake_all()


def schedule() -> None:
    """Chips were freed on some host: the leader schedules now; other agents ignore it."""
    if _agent is not None and _agent.scheduler.leading:
        _agent.wake_scheduler()


def register(app: Celery) -> None:
    from tpuq.queue.app import RING_TASK, RUN_TASK, SCHEDULE_TASK

    app.task(name=RUN_TASK, ignore_result=True, acks_late=False)(run)
    app.task(name=RING_TASK, ignore_result=True, acks_late=False)(ring)
    app.task(name=SCHEDULE_TASK, ignore_result=True, acks_late=False)(schedule)


@inspect_command()
def tpuq_slots(state: Any) -> dict[str, Any]:
    """`celery inspect tpuq_slots`: this host's chips and the attempt holding each."""
    agent = bound_agent()
    chips: dict[str, str | None] = {str(c.index): None for c in agent.chips}
    for sup in agent.executor.supervisors():
        for c in sup.work.chips:
            chips[str(c)] = f"job {sup.work.job_id} attempt {sup.work.attempt}"
    return {"host": agent.name, "tpu_type": agent.tpu_type, "chips": chips}
