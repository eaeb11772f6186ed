"""Tasks and remote-control commands, run inside an agent's Celery worker.

They reach the agent of this process through `bound_host()`; the worker is started by
the agent itself (tpuq/queue/worker.py), so there is exactly one. What they need of it
is the `Host` protocol below, so this package never imports the agent.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from celery.worker.control import inspect_command

log = logging.getLogger("tpuq.queue")


class Host(Protocol):
    """What the tasks need of this process's agent (tpuq.agent.main.Agent)."""

    def run_attempt(self, job_id: int, attempt: int) -> str:
        """Start the attempt if it is still assigned here, or join it if it runs; block
        until it ends; its outcome in a word ("stale" when there is nothing to run)."""

    def wake_all(self) -> None:
        """Schedule now (if leading) and check every job's stop request now."""

    def wake_if_leading(self) -> None:
        """Schedule now, if this agent leads; nothing otherwise."""

    def take_lead(self) -> None:
        """Try to take the scheduler lease now (its holder just let go)."""

    def slots(self) -> dict[str, Any]:
        """This host's name, TPU type and each chip's attempt (or None)."""


_host: Host | None = None


def bind(host: Host | None) -> None:
    global _host
    _host = host


def bound_host() -> Host:
    if _host is None:
        raise RuntimeError("no tpuq agent in this process")
    return _host


def run(job_id: int, attempt: int) -> str:
    """Start the attempt; stay active while it runs, so `celery inspect active` lists it
    (also when the host's own poll started it first and this message came late). The
    leader starts its own host's attempts without a message (Agent.dispatch)."""
    return bound_host().run_attempt(int(job_id), int(attempt))


def wake() -> None:
    """Something changed in the database: schedule now, check stop requests now."""
    if _host is not None:
        _host.wake_all()


def schedule() -> None:
    """Chips were freed on some host: the leader schedules now; other agents ignore it."""
    if _host is not None:
        _host.wake_if_leading()


def lead() -> None:
    """The scheduler leader let go of its lease: every agent tries to take it now."""
    if _host is not None:
        _host.take_lead()


@inspect_command()  # type: ignore[untyped-decorator]  # celery is untyped
def tpuq_slots(state: Any) -> dict[str, Any]:
    """`celery inspect tpuq_slots`: this host's chips and the attempt holding each."""
    return bound_host().slots()
