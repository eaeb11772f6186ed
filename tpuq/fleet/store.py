"""The fleet's rows: declared slots, each member's record, the VMs made, and the one
thing the controller does to jobs: a lost VM's hosts are marked lost and their jobs
requeued in the same transaction, uncharged (state/attempts.finish, as every end of an
attempt), without waiting for a lease.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, bindparam, delete, select, update
from sqlalchemy.orm import Session

from tpuq.fleet.reconcile import RETIRED, Member
from tpuq.fleet.spec import FleetFile, SlotSpec, host_names
from tpuq.state import attempts, gangs, hosts
from tpuq.state.clock import db_now
from tpuq.state.db import rows_changed
from tpuq.state.models import FleetMember, FleetSlot, FleetVm, Host, Meta
from tpuq.state.states import Outcome

PREFIX_KEY = "fleet_prefix"
MEMBER_FIELDS = tuple(f.name for f in dataclasses.fields(Member))

log = logging.getLogger(__name__)


def now(s: Session) -> float:
    return float(s.execute(select(db_now())).scalar_one())


# ---- declared slots ----------------------------------------------------------------------
@dataclass(frozen=True)
class Applied:
    added: list[str]
    changed: list[str]
    removed: list[str]
    kept: list[str]


def apply(s: Session, fleet: FleetFile, by: str) -> Applied:
    """Store the file's slots (the full spec of each) and a member record for each VM to
    keep, before anything is made. Slots not in the file are removed: their VMs are
    deleted by the controller."""
    old_prefix = prefix(s)
    if old_prefix is not None and old_prefix != fleet.prefix and members(s):
        raise ValueError(f"the fleet's prefix is {old_prefix!r}: its VMs are named by it; "
                         f"remove every slot (apply a file with none) before changing it")
    _set_prefix(s, fleet.prefix)
    t = now(s)
    before = {r.name: r.spec for r in s.scalars(select(FleetSlot))}
    wanted = {spec.name: spec.to_json() for spec in fleet.slots}
    gone = {r.name for r in s.scalars(select(FleetSlot).where(FleetSlot.removed_at.is_not(None)))}
    for name in set(before) - set(wanted) - gone:
        # kept until the controller deleted its VMs: the spec says where they are
        s.execute(update(FleetSlot).where(FleetSlot.name == name)
                  .values(removed_at=t, applied_at=t, applied_by=by))
    for name, shape in wanted.items():
        if name not in before:
            s.add(FleetSlot(name=name, spec=shape, applied_at=t, applied_by=by))
        elif before[name] != shape or name in gone:
            s.execute(update(FleetSlot).where(FleetSlot.name == name)
                      .values(spec=shape, applied_at=t, applied_by=by, removed_at=None))
    before = {n: v for n, v in before.items() if n not in gone}
    have = {(m.slot, m.idx) for m in s.scalars(select(FleetMember))}
    for spec in fleet.slots:
        for i in range(spec.count):
            if (spec.name, i) not in have:
                s.add(FleetMember(slot=spec.name, idx=i, generation=1, phase="waiting",
                                  waiting_for="a first create", since=t, tries=0, creates=0,
                                  updated_at=t))
    s.flush()
    return Applied(added=sorted(set(wanted) - set(before)),
                   changed=sorted(n for n in wanted if n in before and before[n] != wanted[n]),
                   removed=sorted(set(before) - set(wanted)),
                   kept=sorted(n for n in wanted if before.get(n) == wanted[n]))


def prefix(s: Session) -> str | None:
    return s.scalar(select(Meta.value).where(Meta.key == PREFIX_KEY))


def _set_prefix(s: Session, value: str) -> None:
    if not rows_changed(s.execute(update(Meta).where(Meta.key == PREFIX_KEY).values(value=value))):
        s.add(Meta(key=PREFIX_KEY, value=value))


def specs(s: Session) -> dict[str, tuple[SlotSpec, bool]]:
    """Every slot's spec, and whether it was removed from the fleet (its VMs go). A row
    whose spec cannot be read (written around `tpuq fleet apply`) is left out, with a
    warning: nothing is made for it, and nothing that reads the fleet fails on it."""
    out: dict[str, tuple[SlotSpec, bool]] = {}
    for r in s.scalars(select(FleetSlot)):
        try:
            out[r.name] = (SlotSpec.from_json(r.spec), r.removed_at is not None)
        except (TypeError, ValueError, AttributeError) as e:
            log.warning("fleet slot %r: its stored spec cannot be read (%s): ignored; "
                        "apply the fleet file again", r.name, e)
    return out


def drop_removed(s: Session, keep: set[str]) -> None:
    """Removed slots whose every member is retired (their records stay: reconcile.retired),
    but those in `keep`."""
    left = select(FleetMember.slot).where(
        (FleetMember.phase != "waiting") | FleetMember.waiting_for.is_distinct_from(RETIRED))
    s.execute(delete(FleetSlot).where(FleetSlot.removed_at.is_not(None),
                                      FleetSlot.name.not_in(left),
                                      FleetSlot.name.not_in(sorted(keep))))


# ---- members -----------------------------------------------------------------------------
def members(s: Session) -> list[Member]:
    rows = s.scalars(select(FleetMember).order_by(FleetMember.slot, FleetMember.idx))
    return [Member(**{f: getattr(r, f) for f in MEMBER_FIELDS}) for r in rows]


MEMBERS = cast(Table, FleetMember.__table__)
# one statement, built once (Core: the ORM's bulk update machinery cost more than the write)
_SAVE = update(MEMBERS).where(MEMBERS.c.slot == bindparam("k_slot"),
                              MEMBERS.c.idx == bindparam("k_idx")) \
    .values({**{f: bindparam(f) for f in MEMBER_FIELDS if f not in ("slot", "idx")},
             "updated_at": db_now()})


def save(s: Session, m: Member) -> None:
    values = {f: getattr(m, f) for f in MEMBER_FIELDS}
    changed = s.execute(_SAVE, {**values, "k_slot": m.slot, "k_idx": m.idx})
    if not rows_changed(changed):
        s.add(FleetMember(**values, updated_at=now(s)))
        s.flush()


# ---- hosts and their jobs ----------------------------------------------------------------
def member_hosts(m: Member, spec: SlotSpec | None) -> list[str]:
    return host_names(m.slot, m.idx, spec.hosts if spec is not None else 1)


def joined(s: Session, names: Sequence[str], stale_s: float) -> bool:
    """Every one of these hosts registered, is not lost and beats."""
    rows = s.execute(select(Host.name, Host.heartbeat_at, Host.lost_reason, Host.stopped_at)
                     .where(Host.name.in_(list(names)))).all()
    t = now(s)
    ok = {r.name for r in rows if r.lost_reason is None and r.stopped_at is None
          and hosts.is_live(r.heartbeat_at, t, stale_s)}
    return ok == set(names)


def lose_hosts(s: Session, names: Iterable[str], why: str, *, retry_backoff_s: float) -> list[int]:
    """Mark the hosts lost and requeue every job they hold, in the caller's transaction:
    as preempted (not charged, no retry used), at once."""
    names = list(names)
    s.execute(update(Host).where(Host.name.in_(names)).values(lost_reason=why))
    requeued: list[int] = []
    end = attempts.Ending(Outcome.PREEMPTED, f"its TPU VM is lost ({why}; seen by the fleet "
                                             "controller)")
    for host in names:
        found: list[tuple[int, int, str | None]] = [
            (job.id, job.attempt, host) for job, _ in attempts.active_on_host(s, host)]
        # a slice job's host is its slice: its attempt ends as one, whichever worker is lost
        found += [(j, a, None) for j, a, _, _ in gangs.active_on_host(s, host)]
        for job_id, attempt, guard in found:
            if attempts.finish(s, job_id, attempt, guard, end, retry_backoff_s=retry_backoff_s,
                               actor="fleet") is not None:
                requeued.append(job_id)
    return requeued


# ---- provisioned VMs ---------------------------------------------------------------------
def vm_up(s: Session, node_id: str, m: Member, chips: int) -> None:
    if s.get(FleetVm, node_id) is None:
        s.add(FleetVm(node_id=node_id, slot=m.slot, idx=m.idx, generation=m.generation,
                      chips=chips, ready_at=now(s)))
        s.flush()


def vm_gone(s: Session, node_id: str, why: str) -> None:
    s.execute(update(FleetVm).where(FleetVm.node_id == node_id, FleetVm.gone_at.is_(None))
              .values(gone_at=db_now(), gone_reason=why))
