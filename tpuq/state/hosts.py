"""Host rows: who holds a host name, registration, heartbeats, drain, and the busy flag.

A host name is held by one agent at a time. Its row names the holder's machine and
state directory (`Holder`); an agent refuses a name that a live agent elsewhere holds,
and takes over one whose holder is gone (stopped, or silent past `TPUQ_HOST_STALE_S`).
After registration every write of the row goes through `Held`, which names the agent's
instance: an agent that lost its name (frozen past the stale limit and taken over, or
forgotten by an admin) changes nothing and learns so on its next heartbeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from tpuq.state.clock import db_now
from tpuq.state.db import rows_changed
from tpuq.state.models import Host


class NameTaken(Exception):
    """Another live agent holds the host name; the message says which."""


class HostLive(Exception):
    """The host's agent is alive: it cannot be forgotten."""


@dataclass(frozen=True)
class Holder:
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

    def stopped(self, s: Session, handover_s: float | None = None) -> None:
        """The agent stops; `handover_s`: it hands over (SIGUSR2), and its running jobs
        wait this long for a new agent. Either way the host gets no new work."""
        until = None if handover_s is None else db_now() + handover_s
        s.execute(update(Host).where(self._mine()).values(stopped_at=db_now(),
                                                          handover_until=until))


def is_live(heartbeat_at: float | None, now: float, stale_s: float) -> bool:
    """A host whose agent beat within `stale_s` (database clock) is alive: it gets work.
    The one rule for it: the scheduler and `tpuq status` both ask here."""
    return heartbeat_at is not None and now - heartbeat_at < stale_s


def out_of_service(row: Any, now: float, stale_s: float) -> str | None:
    """Why a host takes no new work, in words, or None when it does. The one rule: the
    scheduler (and its waiting reasons) and `tpuq status` both ask here."""
    if row.stopped_at is not None:
        if row.handover_until is not None and now < row.handover_until:
            return "handed over: its jobs wait for a new agent"
        return "agent stopped"
    if not is_live(row.heartbeat_at, now, stale_s):
        # its agent died or cannot reach the database; its jobs are requeued when their
        # leases expire
        return "silent: gets no work"
    if was_lost(row):
        return "lost: its leases ran out; no work until it is heard from"
    if row.busy_reason:
        return f"busy: {row.busy_reason}"
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


def _holder_of(row: Host) -> Holder | None:
    if row.machine_id is None or row.home is None:
        return None  # registered before hosts named their holder
    return Holder(row.machine_id, row.home)


def _alive(row: Host, now: float, stale_s: float) -> bool:
    return row.stopped_at is None and is_live(row.heartbeat_at, now, stale_s)


def register(s: Session, held: Held, holder: Holder, *, tpu_type: str | None,
             chips: Sequence[int], boot_id: str, agent_pid: int, stale_s: float,
             seat: tuple[str, int, str] | None = None,
             checkpoint_root: str | None = None) -> str | None:
    """Take the host name for `held.instance` at agent start and describe the host.

    Raises NameTaken when a live agent on another machine or in another state directory
    holds the name. Returns a warning when it takes the name over from a holder elsewhere
    that is gone, else None. A host's drain mark survives its agent's restarts.
    """
    values = {"name": held.name, "tpu_type": tpu_type, "chips": list(chips),
              "boot_id": boot_id, "agent_pid": agent_pid, "started_at": db_now(),
              "heartbeat_at": db_now(), "busy_reason": None, "stopped_at": None,
              "machine_id": holder.machine_id, "home": holder.home,
              "agent_instance": held.instance,
              # (slice, worker, slice type) of a multi-host slice's worker
              "slice_name": seat[0] if seat else None, "slice_worker": seat[1] if seat else None,
              "slice_type": seat[2] if seat else None,
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
    before = _holder_of(row)
    warning = None
    if before is not None and before != holder:
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
        where = _holder_of(row)
        raise HostLive(f"host {name} is alive (last beat {now - (row.heartbeat_at or now):.0f}s "
                       f"ago{', ' + where.describe(row.agent_pid) if where else ''}): stop its "
                       "agent first, or drain it to stop giving it work")
    s.execute(delete(Host).where(Host.name == name))
    return True


def get(s: Session, name: str) -> Host | None:
    return s.get(Host, name, populate_existing=True)
