"""The controller against the fake Cloud TPU API, one fault at a time, through the real
google-cloud-tpu client (in-process): what it makes, deletes, and says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.tpu_api import FakeCloud
from tests.fleet import rig
from tpuq.state.db import Database


@pytest.fixture
def db(tmp_path: Path) -> Database:
    d = Database(f"sqlite:///{tmp_path}/t.db")
    d.upgrade()
    return d


def run(c, cloud: FakeCloud, steps: int, dt: float = 10.0) -> None:
    for _ in range(steps):
        c.step()
        cloud.advance(dt)


def test_a_declared_slot_is_made_once_and_is_ready(db: Database) -> None:
    cloud = FakeCloud()
    rig.apply(db, rig.slot(count=2))
    c = rig.controller(db, cloud)
    run(c, cloud, 4)
    assert sorted(cloud.count.creates) == ["tpuq-v4-0-g1", "tpuq-v4-1-g1"]
    assert all(n == 1 for n in cloud.count.creates.values())
    ms = rig.members(db)
    assert [m.phase for m in ms] == ["up", "up"]
    assert ms[0].waiting_for == "its agent to register"
    # what the VM was asked to be, and what it is given to join by itself
    node = cloud.nodes["projects/proj/locations/us-central2-b/nodes/tpuq-v4-1-g1"]
    assert node["schedulingConfig"] == {"spot": True}
    assert (node["acceleratorType"], node["runtimeVersion"]) == ("v4-8", "tpu-ubuntu2204-base")
    assert node["labels"] == {"tpuq-fleet": "tpuq", "tpuq-slot": "v4", "tpuq-index": "1",
                              "tpuq-generation": "1"}
    md = node["metadata"]
    assert md["startup-script"] == rig.BOOT.script
    assert (md["tpuq-host-prefix"], md["tpuq-database-url"], md["tpuq-broker-url"]) == \
        ("v4-1", "postgresql://db", "redis://broker")


def test_a_stockout_is_a_reason_with_backoff_not_a_loop(db: Database) -> None:
    cloud = FakeCloud()
    cloud.faults.stockouts = 3
    rig.apply(db, rig.slot())
    c = rig.controller(db, cloud)
    run(c, cloud, 6)
    m = rig.members(db)[0]
    assert m.phase in ("waiting", "creating")
    assert m.error_kind == "stockout"
    assert m.waiting_for == "capacity in us-central2-b"
    calls = cloud.count.create_calls
    run(c, cloud, 3, dt=1.0)  # inside the backoff: no new create
    assert cloud.count.create_calls == calls
    run(c, cloud, 40, dt=60.0)
    m = rig.members(db)[0]
    assert m.phase == "up" and m.tries == 0
    assert cloud.count.create_calls == 4  # three stockouts, then the one that made it


def test_a_quota_error_at_the_call_is_told_apart(db: Database) -> None:
    cloud = FakeCloud()
    cloud.faults.quota_errors = 1
    rig.apply(db, rig.slot())
    c = rig.controller(db, cloud)
    c.step()
    m = rig.members(db)[0]
    assert m.error_kind == "quota" and m.phase == "waiting"
    assert "Quota limit" in (m.waiting_for or "")


def test_a_preempted_vm_is_deleted_and_made_anew(db: Database) -> None:
    cloud = FakeCloud()
    rig.apply(db, rig.slot(capacity="on-demand"))
    c = rig.controller(db, cloud)
    run(c, cloud, 3)
    assert cloud.preempt("tpuq-v4-0-g1", spot=False)
    run(c, cloud, 5)
    assert "projects/proj/locations/us-central2-b/nodes/tpuq-v4-0-g1" not in cloud.nodes
    assert cloud.count.creates == {"tpuq-v4-0-g1": 1, "tpuq-v4-0-g2": 1}
    assert rig.members(db)[0].phase == "up"


def test_a_suspended_queued_resource_is_force_deleted_and_asked_anew(db: Database) -> None:
    cloud = FakeCloud()
    rig.apply(db, rig.slot(queued=True, valid_for_s=3600))
    c = rig.controller(db, cloud)
    run(c, cloud, 4)
    assert rig.members(db)[0].phase == "up"
    assert cloud.suspend("tpuq-v4-0-g1")
    run(c, cloud, 6)
    names = sorted(n.rsplit("/", 1)[1] for n in cloud.queued)
    assert names == ["tpuq-v4-0-g2"]
    assert [q["state"]["state"] for q in cloud.queued.values()] == ["ACTIVE"]
    assert rig.members(db)[0].phase == "up"


def test_two_controllers_never_both_act(db: Database) -> None:
    cloud = FakeCloud()
    rig.apply(db, rig.slot(count=3))
    a, b = rig.controller(db, cloud, "a"), rig.controller(db, cloud, "b")
    for _ in range(5):
        a.step()
        b.step()
        cloud.advance(10)
    assert (a.calls > 0) != (b.calls > 0)
    assert all(n == 1 for n in cloud.count.creates.values())


def test_when_the_leader_dies_another_takes_over_within_a_lease(db: Database) -> None:
    from tests.harness import wait_for

    quick = rig.FAST.replace(leader_lease_s=1.0)
    cloud = FakeCloud()
    rig.apply(db, rig.slot(count=1))
    a = rig.controller(db, cloud, "a", settings=quick)
    b = rig.controller(db, cloud, "b", settings=quick)
    a.step()
    assert a.leading and a.calls == 1
    assert b.step() == 0 and not b.leading
    # `a` dies without a word: `b` leads once the lease has run out, not before
    wait_for(lambda: b.keep_lease(), 10, "b to take the lease over")
    cloud.advance(10)
    b.step()
    assert rig.members(db)[0].phase == "up"
    assert cloud.count.creates == {"tpuq-v4-0-g1": 1}
    assert a.step() == 0 and not a.leading


def test_a_preemption_at_a_time_and_slow_creates(db: Database) -> None:
    cloud = FakeCloud()
    cloud.faults.create_s = 300.0  # a slow create: five minutes CREATING
    rig.apply(db, rig.slot())
    c = rig.controller(db, cloud)
    run(c, cloud, 3, dt=60.0)
    m = rig.members(db)[0]
    assert (m.phase, m.waiting_for) == ("creating", "VM creating")
    run(c, cloud, 4, dt=60.0)
    assert rig.members(db)[0].phase == "up"
    cloud.faults.preempt_at["tpuq-v4-0-g1"] = cloud.now + 90.0
    run(c, cloud, 2, dt=60.0)
    assert rig.members(db)[0].phase == "up"  # not yet
    run(c, cloud, 2, dt=60.0)
    assert rig.members(db)[0].generation == 2


def test_api_errors_and_timeouts_make_no_decision_on_a_partial_view(db: Database) -> None:
    cloud = FakeCloud()
    rig.apply(db, rig.slot())
    c = rig.controller(db, cloud)
    cloud.faults.api_errors = 1  # the list call
    c.step()
    assert cloud.count.create_calls == 0 and rig.members(db)[0].phase == "waiting"
    cloud.faults.timeouts = 1
    c.step()
    assert cloud.count.create_calls == 0
    run(c, cloud, 3)
    assert rig.members(db)[0].phase == "up"
