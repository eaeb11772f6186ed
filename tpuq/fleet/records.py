"""Where the controller keeps what it decided: the database (store.py), behind the few
calls the controller makes, each fenced by the leader lease.

The controller talks to `Records`, not to SQL, so its step can be driven with records
kept in memory (the property test: thousands of sequences in seconds) and with these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sqlalchemy.orm import Session

from tpuq.errors import Failure, TpuqError
from tpuq.fleet import store
from tpuq.fleet.reconcile import Member, Step
from tpuq.fleet.spec import SlotSpec
from tpuq.settings import Settings
from tpuq.state import leader
from tpuq.state.db import Database

ROLE = "fleet"


class NotLeader(TpuqError):
    """The lease was lost: record nothing more, call nothing."""

    KIND = Failure.CONFLICT


class Records(Protocol):
    def keep_lease(self) -> bool: ...

    def load(self) -> tuple[str, dict[str, tuple[SlotSpec, bool]], list[Member]]:
        """The fleet's prefix, each slot's spec (and whether removed), every member."""
        ...

    def joined(self, hosts: Sequence[str]) -> bool: ...

    def record(self, m: Member, step: Step, hosts: Sequence[str], node_id: str,
               chips: int) -> list[int]:
        """Write the step before its call: the member, a lost VM's hosts (their jobs
        requeued: the ids), the VM's time; NotLeader when the lease is gone."""
        ...

    def save(self, m: Member) -> None:
        """The member once its call answered; NotLeader when the lease is gone."""
        ...

    def drop_removed(self, keep: set[str]) -> None:
        """Forget removed slots whose members are all retired, but those in `keep`."""
        ...

    def now(self) -> float: ...

    def resign(self) -> None: ...


class DbRecords:
    def __init__(self, db: Database, settings: Settings, holder: str) -> None:
        self.db, self.settings, self.holder = db, settings, holder

    def keep_lease(self) -> bool:
        with self.db.write() as s:
            return leader.acquire(s, ROLE, self.holder, self.settings.leader_lease_s)

    def _fence(self, s: Session) -> None:
        if not leader.acquire(s, ROLE, self.holder, self.settings.leader_lease_s):
            raise NotLeader()

    def load(self) -> tuple[str, dict[str, tuple[SlotSpec, bool]], list[Member]]:
        with self.db.read() as s:
            return store.prefix(s) or "tpuq", store.specs(s), store.members(s)

    def joined(self, hosts: Sequence[str]) -> bool:
        with self.db.read() as s:
            return store.joined(s, hosts, self.settings.host_stale_s)

    def record(self, m: Member, step: Step, hosts: Sequence[str], node_id: str,
               chips: int) -> list[int]:
        with self.db.write() as s:
            self._fence(s)
            store.save(s, step.member)
            if step.vm_gone:
                store.vm_gone(s, node_id, step.vm_gone)
            requeued = store.lose_hosts(s, hosts, step.lose,
                                        retry_backoff_s=self.settings.retry_backoff_s) \
                if step.lose else []
            if step.vm_up:
                store.vm_up(s, node_id, step.member, chips)
            return requeued

    def save(self, m: Member) -> None:
        with self.db.write() as s:
            self._fence(s)
            store.save(s, m)

    def drop_removed(self, keep: set[str]) -> None:
        with self.db.write() as s:
            store.drop_removed(s, keep)

    def now(self) -> float:
        with self.db.read() as s:
            return store.now(s)

    def resign(self) -> None:
        with self.db.write() as s:
            leader.release(s, ROLE, self.holder)
