"""The reaper: the leader requeues the jobs whose host stopped renewing their lease.

An expired lease is only a suspect until a later pass, REAP_CONFIRM_S (at most a third of
a lease) on, still finds it expired: after a database outage every lease looks expired,
and the hosts need a moment to renew theirs. A new leader starts with no suspects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tpuq.settings import Settings
from tpuq.state import attempts, gangs, hosts
from tpuq.state.db import Database

log = logging.getLogger("tpuq.scheduler")
# An expired lease is requeued once a reaper pass this much later still finds it expired
# (at most a third of a lease). A live host that was cut off renews within its retry
# cap (2 s, agent/attempts/supervisor.py) once it reaches the database again.
REAP_CONFIRM_S = 5.0


class Reaper:
    """`leads`: whether this agent holds the leader lease now (Scheduler.has_lease)."""

    def __init__(self, db: Database, settings: Settings, leads: Callable[[], bool]) -> None:
        self.db = db
        self.settings = settings
        self.leads = leads
        self._suspects: dict[tuple[int, int], float] = {}  # expired lease -> first seen

    def reap(self) -> list[int]:
        """Requeue jobs whose host stopped renewing their lease (leader only). The
        keeper of an attempt stops it before its lease can run out (agent/keeper/process.py), so
        requeueing at once after the confirmation is safe."""
        if not self.leads():
            self._suspects = {}
            return []
        margin = min(1.0, self.settings.lease_s / 10)  # as a gang's worker 0's (agent/attempts/gang.py)
        with self.db.read() as s:
            expired = attempts.expired_leases(s)
            stale = gangs.stale(s, margin)
        if stale:  # slice workers of attempts that are over, that nobody reports on
            with self.db.write() as s:
                hosts.mark_lost(s, gangs.sweep(s, stale))
        now = time.monotonic()
        self._suspects = {k: self._suspects.get(k, now) for k in expired}
        grace = min(self.settings.lease_s / 3, REAP_CONFIRM_S)
        due = {k for k, seen in self._suspects.items() if now - seen >= grace}
        if not due:
            return []
        with self.db.write() as s:
            requeued = attempts.requeue_expired(
                s, due, retry_backoff_s=self.settings.retry_backoff_s,
                host_retries=self.settings.host_error_retries)
        if requeued:
            log.warning("requeued jobs with expired leases: %s", requeued)
        return requeued
