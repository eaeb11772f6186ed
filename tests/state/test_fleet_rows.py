"""The fleet's rows on SQLite and PostgreSQL: a lost VM's hosts and jobs, the slots an
admin applies, and what the fleet cost."""

from __future__ import annotations

from tests.state.rows import register_host
from tpuq.fleet import costs, store
from tpuq.fleet.reconcile import Member
from tpuq.fleet.spec import FleetFile, SlotSpec
from tpuq.spec import JobSpec
from tpuq.state import attempts, hosts, jobs
from tpuq.state.models import Attempt, Host, Job

SLOT = SlotSpec(name="v4", accelerator_type="v4-8", runtime_version="rv", project="p",
                zone="z", capacity="spot", count=2)


def running_on(s, host: str) -> int:
    job = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/tmp", owner="ann",
                                 team="default", grace_s=30.0, chips=4))
    n = attempts.assign(s, job, 0, host, [0, 1, 2, 3], lease_s=600.0)
    assert n == 1
    assert attempts.start(s, job, 1, host, boot_id="b", log_path="/l", lease_s=600.0)
    return job


def test_a_lost_vm_requeues_its_jobs_at_once_uncharged_and_its_host_gets_no_work(db):
    with db.write() as s:
        register_host(s, "v4-0-w0")
        job = running_on(s, "v4-0-w0")
    with db.write() as s:
        requeued = store.lose_hosts(s, ["v4-0-w0"], "VM PREEMPTED", retry_backoff_s=10.0)
    assert requeued == [job]
    with db.read() as s:
        row = s.get(Job, job)
        assert (row.state, row.preemptions, row.failures) == ("queued", 1, 0)
        a = s.query(Attempt).filter_by(job_id=job).one()
        assert a.outcome == "preempted"  # not charged (states.NOT_CHARGED)
        assert "its TPU VM is lost (VM PREEMPTED" in a.reason
        h = s.get(Host, "v4-0-w0")
        assert hosts.out_of_service(h, h.heartbeat_at, 30.0, None) == "lost: VM PREEMPTED"


def test_an_agent_that_registers_the_name_again_clears_the_loss(db):
    with db.write() as s:
        register_host(s, "v4-0-w0")
        store.lose_hosts(s, ["v4-0-w0"], "VM gone", retry_backoff_s=10.0)
    with db.write() as s:
        # the replacement VM: another machine takes the name at once (a lost holder is
        # not alive), without waiting for the old one to go silent
        assert register_host(s, "v4-0-w0", machine="m-new") is not None
    with db.read() as s:
        h = s.get(Host, "v4-0-w0")
        assert h.lost_reason is None and h.machine_id == "m-new"
        assert store.joined(s, ["v4-0-w0"], 30.0)


def test_apply_stores_every_spec_and_members_and_keeps_removed_slots_until_retired(db):
    with db.write() as s:
        done = store.apply(s, FleetFile("tpuq", (SLOT,)), "admin")
    assert done.added == ["v4"]
    with db.read() as s:
        assert store.specs(s) == {"v4": (SLOT, False)}
        assert [(m.slot, m.idx, m.phase) for m in store.members(s)] == \
            [("v4", 0, "waiting"), ("v4", 1, "waiting")]
    with db.write() as s:
        done = store.apply(s, FleetFile("tpuq", ()), "admin")
    assert done.removed == ["v4"]
    with db.read() as s:
        assert store.specs(s) == {"v4": (SLOT, True)}
    with db.write() as s:
        try:
            store.apply(s, FleetFile("other", ()), "admin")
        except ValueError as e:
            assert "prefix" in str(e)
        else:
            raise AssertionError("a prefix change with members on record was accepted")


def test_costs_are_provisioned_against_used_per_slot(db):
    with db.write() as s:
        store.apply(s, FleetFile("tpuq", (SLOT,)), "admin")
        t0 = store.now(s)
        store.vm_up(s, "tpuq-v4-0-g1", Member("v4", 0), chips=4)
        register_host(s, "v4-0-w0")
        running_on(s, "v4-0-w0")
    with db.read() as s:
        rows = {r["slot"]: r for r in costs.chip_hours(s, t0 - 1, t0 + 3600)}
    v4 = rows["v4"]
    assert 3.9 < v4["provisioned_chip_hours"] <= 4.0  # 4 chips for (almost) an hour
    assert 3.9 < v4["used_chip_hours"] <= 4.0  # a 4-chip job running all of it
    assert rows["total"]["provisioned_chip_hours"] == v4["provisioned_chip_hours"]


def test_a_slot_whose_stored_spec_cannot_be_read_breaks_nothing(db, caplog):
    """A spec written around `tpuq fleet apply` (by hand, or by a broken release) is left
    out with a warning; the fleet's other slots and `tpuq status` still read."""
    from sqlalchemy import text

    from tpuq.fleet import report

    with db.write() as s:
        store.apply(s, FleetFile("tpuq", (SLOT,)), by="admin")
        s.execute(text("INSERT INTO fleet_slots (name, spec, applied_at) "
                       "VALUES ('bad', '{\"n\": 1}', 0)"))
    with db.read() as s:
        assert set(store.specs(s)) == {"v4"}
        report.waiting_lines(s)
    assert "fleet slot 'bad': its stored spec cannot be read" in caplog.text
