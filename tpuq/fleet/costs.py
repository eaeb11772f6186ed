"""What the fleet costs against what jobs used of it: chip-hours provisioned (each VM
from READY until gone, fleet_vms) and chip-hours of attempts on its hosts (single-host
jobs by their chips, slice jobs by each worker's host), per slot, over a period.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from tpuq.fleet import store
from tpuq.fleet.spec import SlotSpec, host_names
from tpuq.shapes import host_chips
from tpuq.state.models import Attempt, FleetMember, FleetVm, GangWorker


def _overlap(start: float | None, end: float | None, since: float, until: float) -> float:
    if start is None:
        return 0.0
    return max(0.0, min(end if end is not None else until, until) - max(start, since))


def chip_hours(s: Session, since: float, until: float | None = None) -> list[dict[str, Any]]:
    """One row per slot (and a "total" row last): provisioned, used, idle chip-hours."""
    until = store.now(s) if until is None else until
    specs = {name: spec for name, (spec, _) in store.specs(s).items()}
    provisioned: dict[str, float] = defaultdict(float)
    for vm in s.scalars(select(FleetVm).where(or_(FleetVm.gone_at.is_(None),
                                                  FleetVm.gone_at > since))):
        provisioned[vm.slot] += vm.chips * _overlap(vm.ready_at, vm.gone_at, since, until) / 3600
    used: dict[str, float] = defaultdict(float)
    owner = _host_owners(s, specs)
    if owner:
        names = list(owner)
        for a in s.execute(select(Attempt.host, Attempt.chips, Attempt.started_at,
                                  Attempt.ended_at).where(Attempt.host.in_(names))):
            used[owner[a.host]] += len(a.chips or ()) * \
                _overlap(a.started_at, a.ended_at, since, until) / 3600
        for w in s.execute(select(GangWorker.host, GangWorker.started_at, GangWorker.ended_at)
                           .where(GangWorker.host.in_(names))):
            chips = host_chips(specs[owner[w.host]].accelerator_type) or 0
            used[owner[w.host]] += chips * _overlap(w.started_at, w.ended_at, since, until) / 3600
    rows = [_row(name, provisioned[name], used[name])
            for name in sorted(set(specs) | set(provisioned))]
    rows.append(_row("total", sum(provisioned.values()), sum(used.values())))
    return rows


def _row(slot: str, provisioned: float, used: float) -> dict[str, Any]:
    idle = max(0.0, provisioned - used)
    return {"slot": slot, "provisioned_chip_hours": round(provisioned, 6),
            "used_chip_hours": round(used, 6), "idle_chip_hours": round(idle, 6),
            "idle_fraction": round(idle / provisioned, 4) if provisioned else None}


def _host_owners(s: Session, specs: dict[str, SlotSpec]) -> dict[str, str]:
    """Host name -> its slot, for every member's hosts (names are the same in every
    generation, spec.host_names)."""
    out = {}
    for m in s.execute(select(FleetMember.slot, FleetMember.idx)):
        spec = specs.get(m.slot)
        for h in host_names(m.slot, m.idx, spec.hosts if spec else 1):
            out[h] = m.slot
    return out
