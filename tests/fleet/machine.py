"""A stateful property test of the fleet controller: random sequences of preemptions,
stockouts, quota and API errors, timeouts, suspended requests, rescales and controller
restarts (cleanly, or dying before or after a call), against the fake Cloud TPU API
through the real google-cloud-tpu client.

What must hold at every step: no VM id is ever made twice, and no slot ever has two
VMs that are not being deleted. At the end, once capacity exists (the faults cleared):
every declared slot READY, and nothing dead or suspended left behind.

tests/fleet/test_properties.py runs it in the suite; bench/fleet.py --long runs more.
"""

from __future__ import annotations

import collections
import os
import tempfile
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sqlalchemy import delete

from tests.fakes.tpu_api import FakeCloud
from tests.fleet import rig
from tests.fleet.memory import MemoryRecords
from tpuq.fleet.port import CreateRequest, TpuApi
from tpuq.fleet.spec import FleetFile
from tpuq.state.db import Database
from tpuq.state.models import FleetMember, FleetSlot, FleetVm, Host, Leader, Meta

DEAD_NODES = ("PREEMPTED", "TERMINATED")
DEAD_QUEUED = ("SUSPENDED", "FAILED")
SPOT = rig.slot("a", count=2, capacity="spot")
QUEUED = rig.slot("b", count=1, capacity="on-demand", queued=True, valid_for_s=7200)
_shared: dict[str, Any] = {}


class Crash(Exception):
    """The controller's process dies here."""


class Dying:
    """An API that lets the controller die just before or just after its next change."""

    def __init__(self, api: TpuApi, when: str) -> None:
        self.api, self.when = api, when

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def create(self, req: CreateRequest) -> str:
        if self.when == "before":
            raise Crash()
        self.api.create(req)
        raise Crash()


def fresh_database() -> Database:
    """A migrated SQLite database, emptied of the fleet's rows. One engine for every
    sequence: SQLAlchemy caches compiled statements per engine, and a new one per
    sequence spent most of the run compiling."""
    if "db" not in _shared:
        d = tempfile.mkdtemp(prefix="tpuq-fleet-",
                             dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        db = Database(f"sqlite:///{os.path.join(d, 'fleet.db')}")
        db.upgrade()
        _shared["db"], _shared["dir"] = db, d
    db = _shared["db"]
    with db.write() as s:
        for table in (FleetMember, FleetSlot, FleetVm, Leader, Host):
            s.execute(delete(table))
        s.execute(delete(Meta).where(Meta.key == "fleet_prefix"))
    return db


# the whole stack (SQLite, the google-cloud-tpu client in-process) instead of records in
# memory and the fake called directly: bench/fleet.py --real
REAL = os.environ.get("TPUQ_FLEET_REAL") == "1"


class FleetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cloud = FakeCloud()
        self.cloud.faults.create_s = 20.0
        self.restarts = 0
        if REAL:
            self.db = fresh_database()
        else:
            self.records = MemoryRecords()
        self.controller = self.new_controller(0)
        self.spot_count = SPOT.count

    def new_controller(self, seed: int) -> Any:
        if REAL:
            return rig.controller(self.db, self.cloud, seed=seed)
        return rig.memory_controller(self.records, self.cloud, seed=seed)

    def apply(self, *slots: Any) -> None:
        if REAL:
            rig.apply(self.db, *slots)
        else:
            self.records.apply(FleetFile("tpuq", tuple(slots)))

    @initialize()
    def declare(self) -> None:
        self.apply(SPOT, QUEUED)

    # ---- what happens ----------------------------------------------------------------------
    @rule(dt=st.sampled_from([1.0, 5.0, 20.0, 60.0, 300.0]))
    def step(self, dt: float) -> None:
        self.controller.step()
        self.cloud.advance(dt)

    @rule(n=st.integers(0, 3), spot=st.booleans())
    def preempt(self, n: int, spot: bool) -> None:
        ready = sorted(k.rsplit("/", 1)[1] for k, v in self.cloud.nodes.items()
                       if v["state"] == "READY")
        if ready:
            self.cloud.preempt(ready[n % len(ready)], spot=spot)

    @rule()
    def suspend(self) -> None:
        for name in sorted(self.cloud.queued):
            self.cloud.suspend(name.rsplit("/", 1)[1])

    @rule(kind=st.sampled_from(["stockouts", "quota_errors", "api_errors", "timeouts"]),
          n=st.integers(1, 4))
    def fault(self, kind: str, n: int) -> None:
        setattr(self.cloud.faults, kind, getattr(self.cloud.faults, kind) + n)

    @rule(count=st.integers(0, 3))
    def rescale(self, count: int) -> None:
        self.spot_count = count
        self.apply(rig.replace(SPOT, count=count), QUEUED)

    @rule(when=st.sampled_from(["restart", "before", "after"]))
    def restart(self, when: str) -> None:
        """A new controller process (same host: the same lease holder); `before`/`after`:
        the old one died just before or just after a create call."""
        if when != "restart":
            self.controller.api = Dying(self.controller.api, when)  # type: ignore[assignment]
            try:
                self.controller.step()
            except Crash:
                pass
        self.restarts += 1
        self.controller = self.new_controller(self.restarts)

    # ---- what must hold --------------------------------------------------------------------
    @invariant()
    def no_id_made_twice(self) -> None:
        twice = {k: n for k, n in self.cloud.count.creates.items() if n > 1}
        assert not twice, f"made twice: {twice}"

    @invariant()
    def never_two_vms_for_one_slot(self) -> None:
        per: collections.Counter[tuple[str, str]] = collections.Counter()
        for n in self.cloud.nodes.values():
            if n["state"] != "DELETING":
                per[(n["labels"]["tpuq-slot"], n["labels"]["tpuq-index"])] += 1
        assert all(v <= 1 for v in per.values()), f"two VMs for one slot: {per}"
        queued = collections.Counter(
            n.rsplit("-g", 1)[0] for n, q in self.cloud.queued.items()
            if q["state"]["state"] != "DELETING")
        assert all(v <= 1 for v in queued.values()), f"two requests for one slot: {queued}"

    def teardown(self) -> None:
        self.converges()

    def converges(self) -> None:
        """Capacity exists from now on: within a bounded number of steps every declared
        slot is READY and nothing dead is left."""
        self.cloud.faults = type(self.cloud.faults)(create_s=20.0)
        self.controller = self.new_controller(99)
        for _ in range(40):
            self.controller.step()
            self.cloud.advance(700.0)  # past the longest backoff (FAST: 600 s)
            if self.settled():
                return
        raise AssertionError(f"did not settle: {self.describe()}")

    def settled(self) -> bool:
        nodes = {k.rsplit("/", 1)[1]: v for k, v in self.cloud.nodes.items()}
        queued = {k.rsplit("/", 1)[1]: v for k, v in self.cloud.queued.items()}
        want = {("a", i) for i in range(self.spot_count)} | {("b", 0)}
        ready = {(v["labels"]["tpuq-slot"], int(v["labels"]["tpuq-index"]))
                 for v in nodes.values() if v["state"] == "READY"}
        dead = [n for n, v in nodes.items() if v["state"] in DEAD_NODES] + \
            [n for n, v in queued.items() if v["state"]["state"] in DEAD_QUEUED]
        return ready == want and len(nodes) == len(want) and not dead \
            and all(v["state"]["state"] == "ACTIVE" for v in queued.values())

    def describe(self) -> str:
        nodes = [(k.rsplit("/", 1)[1], v["state"]) for k, v in self.cloud.nodes.items()]
        queued = [(k.rsplit("/", 1)[1], v["state"]["state"]) for k, v in self.cloud.queued.items()]
        members = rig.members(self.db) if REAL else self.records.members
        return f"nodes {nodes} queued {queued} members {members}"



