"""The fleet as people read it: one line per VM a slot keeps, saying what it waits for,
since when, and how many tries ("v4-8 spot, slot 2: waiting for capacity in
us-central2-b since 10:02, 14 tries"), for `tpuq fleet status` and `tpuq status`.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tpuq.fleet import store
from tpuq.fleet.reconcile import Member, retired
from tpuq.fleet.spec import SlotSpec, host_names, node_id
from tpuq.state import leader
from tpuq.state.models import FleetMember

ROLE = "fleet"


def clock(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


def line(spec: SlotSpec, m: Member, now: float) -> str:
    head = f"{spec.describe()}, slot {m.idx}"
    if m.phase == "up" and m.waiting_for is None:
        return f"{head}: ready since {clock(m.ready_at or m.since)}"
    text = f"{head}: waiting for {m.waiting_for or 'the controller'} since {clock(m.since)}"
    if m.tries:
        text += f", {m.tries} {'try' if m.tries == 1 else 'tries'}"
    if m.next_try_at is not None and m.next_try_at > now and m.phase == "waiting":
        text += f"; next try at {time.strftime('%H:%M:%S', time.localtime(m.next_try_at))}"
    return text


def view(s: Session) -> dict[str, Any]:
    """Slots, members (with their line) and who controls the fleet: the JSON of
    `tpuq fleet status --json` and the lines of `tpuq status`."""
    now = store.now(s)
    prefix = store.prefix(s) or "tpuq"
    specs = store.specs(s)
    members = []
    for m in store.members(s):
        spec, removed = specs.get(m.slot, (None, True))
        if spec is None or retired(m):
            continue
        members.append({
            "slot": m.slot, "index": m.idx, "generation": m.generation, "phase": m.phase,
            "node": node_id(prefix, m.slot, m.idx, m.generation),
            "hosts": host_names(m.slot, m.idx, spec.hosts), "waiting_for": m.waiting_for,
            "since": m.since, "tries": m.tries, "next_try_at": m.next_try_at,
            "error": m.error_kind, "node_state": m.node_state, "health": m.health,
            "queued_state": m.queued_state, "ready": m.phase == "up" and m.waiting_for is None,
            "removed": removed or m.idx >= spec.count, "line": line(spec, m, now)})
    slots = [{"name": name, "removed": removed, **spec.to_json(), "chips_per_vm": spec.chips}
             for name, (spec, removed) in sorted(specs.items())]
    return {"prefix": prefix, "slots": slots, "members": members,
            "controller": leader.current(s, ROLE), "now": now}


def waiting_lines(s: Session) -> list[str]:
    """The lines of members not ready, for `tpuq status` (empty without a fleet: then one
    query, on every `tpuq status`)."""
    if s.scalar(select(FleetMember.slot).limit(1)) is None:
        return []
    return [m["line"] for m in view(s)["members"] if not m["ready"]]
