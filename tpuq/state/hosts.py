"""Host rows: who holds a host name, registration, heartbeats, drain, and the busy flag.

A host name is held by one agent at a time. Its row names that agent's machine and
state directory (`AgentHome`); an agent refuses a name that a live agent elsewhere holds,
and takes over one whose agent is gone (stopped, or silent past `TPUQ_HOST_STALE_S`).
("Holder" is kept for what holds the TPU: a process, agent/tpu/holders.py.)
After registration every write of the row goes through `Held`, which names the agent's
instance: an agent that lost its name (frozen past the stale limit and taken over, or
forgotten by an admin) changes nothing and learns so on its next heartbeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, delete, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from tpuq.errors import Failure, TpuqError
from tpuq.shapes import Seat
from tpuq.state.clock import db_now
from tpuq.state.db import SCHEMA_HEAD, rows_changed
from tpuq.state.models import Host, Meta
from tpuq.state.versions import MIN_CODE_KEY, rank


class NameTaken(TpuqError):
    """Another live agent holds the host name; the message says which."""

    KIND = Failure.CONFLICT


class HostLive(TpuqError):
    """The host's agent is alive: it cannot be forgotten."""

    KIND = Failure.CONFLICT


@dataclass(frozen=True)
class AgentHome:
    """What makes two agents the same agent: one machine, one state directory."""

    machine_id: str
    home: str

    def describe(self, pid: int | None = None) -> str:
        return f"machine {self.machine_id[:12]}, home {self.home}" + (
            f", agent pid {pid}" if pid else "")


@dataclass(frozen=True)
class Held:
    """A host name as one agent instance holds it: the only way to write its row."""

    name: str
    instance: str

    def _mine(self) -> ColumnElement[bool]:
        return (Host.name == self.name) & (Host.agent_instance == self.instance)

    def heartbeat(self, s: Session) -> bool:
        """Beat; False when this instance no longer holds the name."""
        return bool(rows_changed(s.execute(update(Host).where(self._mine())
                                           .values(heartbeat_at=db_now()))))

    def set_busy(self, s: Session, reason: str | None) -> None:
        s.execute(update(Host).where(self._mine(), Host.busy_reason.is_distinct_from(reason))
                  .values(busy_reason=reason))

    def set_unavailable(self, s: Session, unavailable: dict[str, str] | None) -> None:
        """What this host does not offer, and why (chip count or WHOLE_HOST -> reason)."""
        s.execute(update(Host).where(self._mine()).values(unavailable=unavailable or None))

    def set_disk_low(self, s: Session, reason: str | None) -> None:
        """Why the host takes no work for want of disk (its agent measures), or None."""
        s.execute(update(Host).where(self._mine(), Host.disk_low.is_distinct_from(reason))
                  .values(disk_low=reason))

    def stopped(self, s: Session, handover_s: float | None = None) -> None:
        """The agent stops; `handover_s`: it hands over (SIGUSR2), and its running jobs
        wait this long for a new agent. Either way the host gets no new work."""
        until = None if handover_s is None else db_now() + handover_s
        s.execute(update(Host).where(self._mine()).values(stopped_at=db_now(),
                                                          handover_until=until))


WHOLE_HOST = "*"  # an `unavailable` key: the host offers no shape at all, for this reason


def withheld(unavailable: dict[str, str] | None) -> frozenset[int]:
    """The chip counts a host's `unavailable` map says it does not offer."""
    return frozenset(int(k) for k in (unavailable or {}) if k.isdigit())


def offers_nothing(unavailable: dict[str, str] | None) -> str | None:
    return (unavailable or {}).get(WHOLE_HOST)


def is_live(heartbeat_at: float | None, now: float, stale_s: float) -> bool:
    """A host whose agent beat within `stale_s` (database clock) is alive: it gets work.
    The one rule for it: the scheduler and `tpuq status` both ask here."""
    return heartbeat_at is not None and now - heartbeat_at < stale_s


def min_code_sql() -> Any:
    """The oldest code the database admits (versions.py), as a scalar subquery."""
    return select(Meta.value).where(Meta.key == MIN_CODE_KEY).scalar_subquery()


def min_code(s: Session) -> str | None:
    return s.scalar(select(min_code_sql()))


def out_of_service(row: Any, now: float, stale_s: float, min_code: str | None) -> str | None:
    """Why a host takes no new work, in words, or None when it does. The one rule: the
    scheduler (and its waiting reasons) and `tpuq status` both ask here. `min_code`: the
    oldest code the database admits (versions.py)."""
    if getattr(row, "lost_reason", None):
        # the fleet controller saw its VM go: its jobs were requeued at once
        return f"lost: {row.lost_reason}"
    if row.stopped_at is not None:
        if row.handover_until is not None and now < row.handover_until:
            return "handed over: its jobs wait for a new agent"
        return "agent stopped"
    if not is_live(row.heartbeat_at, now, stale_s):
        # its agent died or cannot reach the database; its jobs are requeued when their
        # leases expire
        return "silent: gets no work"
    if min_code is not None and (row.code_revision is None
                                 or rank(row.code_revision) < rank(min_code)):
        # it may not start jobs (migrations/versions/0015): its running ones go on
        return (f"agent's tpuq is older than the database (schema "
                f"{row.code_revision or 'before ' + min_code}, needs {min_code}): upgrade "
                "tpuq on it and hand over (kill -USR2 <agent pid>)")
    if was_lost(row):
        return "lost: its leases ran out; no work until it is heard from"
    if row.busy_reason:
        return f"busy: {row.busy_reason}"
    nothing = offers_nothing(getattr(row, "unavailable", None))
    if nothing:
        return f"offers no chip shape: {nothing}"
    if getattr(row, "disk_low", None):
        return str(row.disk_low)
    if row.draining:
        return "draining"
    return None


def was_lost(row: Any) -> bool:
    """The reaper requeued work this host stopped renewing, and it has not beaten since."""
    return row.lost_at is not None and (row.heartbeat_at is None
                                        or row.heartbeat_at <= row.lost_at)


def mark_lost(s: Session, names: Sequence[str]) -> None:
    """These hosts stopped renewing the leases of their work (the reaper, a gang's lost
    worker): they get none until their agent is heard from again (a heartbeat after
    now). A live agent beats within TPUQ_HEARTBEAT_S and is back at once."""
    if names:
        s.execute(update(Host).where(Host.name.in_(sorted(set(names))))
                  .values(lost_at=db_now()))


def _home_of(row: Host) -> AgentHome | None:
    if row.machine_id is None or row.home is None:
        return None  # registered before hosts named their agent's home
    return AgentHome(row.machine_id, row.home)


def _alive(row: Host, now: float, stale_s: float) -> bool:
    return row.stopped_at is None and row.lost_reason is None and \
        is_live(row.heartbeat_at, now, stale_s)


def register(s: Session, held: Held, home: AgentHome, *, tpu_type: str | None,
             chips: Sequence[int], boot_id: str, agent_pid: int, stale_s: float,
             seat: Seat | None = None,
             unavailable: dict[str, str] | None = None,
             checkpoint_root: str | None = None) -> str | None:
    """Take the host name for `held.instance` at agent start and describe the host.

    Raises NameTaken when a live agent on another machine or in another state directory
    holds the name. Returns a warning when it takes the name over from an agent elsewhere
    that is gone, else None. A host's drain mark survives its agent's restarts.
    """
    values = {"name": held.name, "tpu_type": tpu_type, "chips": list(chips),
              "boot_id": boot_id, "agent_pid": agent_pid, "started_at": db_now(),
              "heartbeat_at": db_now(), "busy_reason": None, "stopped_at": None,
              "disk_low": None,
              "machine_id": home.machine_id, "home": home.home,
              "agent_instance": held.instance, "lost_reason": None,
              "code_revision": SCHEMA_HEAD,
              # a multi-host slice's worker: its place in the slice
              "slice_name": seat.slice if seat else None,
              "slice_worker": seat.worker if seat else None,
              "slice_type": seat.tpu_type if seat else None, "unavailable": unavailable or None,
              "checkpoint_root": checkpoint_root or None, "handover_until": None}
    mod = postgresql if s.get_bind().dialect.name == "postgresql" else sqlite
    inserted = s.execute(mod.insert(Host).values(**values, draining=False)
                         .on_conflict_do_nothing(index_elements=["name"])
                         .returning(Host.name)).scalar_one_or_none()
    if inserted is not None:
        return None
    row = s.scalars(select(Host).where(Host.name == held.name).with_for_update()
                    .execution_options(populate_existing=True)).one()
    now = float(s.execute(select(db_now())).scalar_one())
    before = _home_of(row)
    warning = None
    if before is not None and before != home:
        ago = now - (row.heartbeat_at or now)
        if _alive(row, now, stale_s):
            raise NameTaken(
                f"host name {held.name!r} is held by a live agent ({before.describe(row.agent_pid)}"
                f", last beat {ago:.0f}s ago): give this agent another TPUQ_HOST, or stop "
                f"that agent (an admin can `tpuq host forget {held.name}` once it is gone)")
        warning = (f"host name {held.name!r} was held by {before.describe(row.agent_pid)}, "
                   f"silent for {ago:.0f}s: taking it over")
    s.execute(update(Host).where(Host.name == held.name)
              .values({k: v for k, v in values.items() if k != "name"}))
    return warning


def live_agents(c: Connection, stale_s: float) -> list[str]:
    """Hosts whose agent beats (at any schema since the first: plain columns)."""
    rows = c.execute(text("SELECT name, heartbeat_at, stopped_at FROM hosts")).all()
    now = float(c.execute(select(db_now())).scalar_one())
    return sorted(r.name for r in rows
                  if r.stopped_at is None and is_live(r.heartbeat_at, now, stale_s))


def set_draining(s: Session, name: str, draining: bool) -> bool:
    r = s.execute(update(Host).where(Host.name == name).values(draining=draining))
    return bool(rows_changed(r))


def forget(s: Session, name: str, stale_s: float) -> bool:
    """Delete the row of a host that is gone (False when there is none). Raises HostLive
    while its agent beats: it would register again at once, or lose its name."""
    row = get(s, name)
    if row is None:
        return False
    now = float(s.execute(select(db_now())).scalar_one())
    if _alive(row, now, stale_s):
        where = _home_of(row)
        raise HostLive(f"host {name} is alive (last beat {now - (row.heartbeat_at or now):.0f}s "
                       f"ago{', ' + where.describe(row.agent_pid) if where else ''}): stop its "
                       "agent first, or drain it to stop giving it work")
    s.execute(delete(Host).where(Host.name == name))
    return True


def get(s: Session, name: str) -> Host | None:
    return s.get(Host, name, populate_existing=True)
