"""Who holds a host name: one live agent at a time, and only it writes the host's row."""

from __future__ import annotations

import pytest

from tests.state.rows import register_host
from tpuq.state import hosts


def test_a_live_agent_elsewhere_keeps_its_name_and_says_who_it_is(db):
    with db.write() as s:
        first = register_host(s, "h", machine="vm-1", home="/srv/a")
    with pytest.raises(hosts.NameTaken) as e, db.write() as s:
        register_host(s, "h", chips=(0,), machine="vm-2", home="/srv/b")
    assert "'h' is held by a live agent (machine vm-1, home /srv/a, agent pid 1" in str(e.value)
    assert "another TPUQ_HOST" in str(e.value)
    with db.write() as s:
        row = hosts.get(s, "h")
        assert row is not None and row.chips == [0, 1, 2, 3] and row.stopped_at is None
        assert first.heartbeat(s), "the refused agent changed nothing"


def test_another_state_directory_on_the_same_machine_is_another_agent(db):
    with db.write() as s:
        register_host(s, "h", machine="vm-1", home="/srv/a")
    with pytest.raises(hosts.NameTaken), db.write() as s:
        register_host(s, "h", machine="vm-1", home="/srv/b")


def test_the_same_agent_restarting_takes_its_name_back_and_its_old_self_is_fenced(db):
    with db.write() as s:
        old = register_host(s, "h", machine="vm-1", home="/srv/a")
        assert hosts.set_draining(s, "h", True)
    with db.write() as s:
        held = hosts.Held("h", "restarted")
        assert hosts.register(s, held, hosts.AgentHome("vm-1", "/srv/a"), tpu_type="v4-8",
                              chips=[0, 1, 2, 3], boot_id="b", agent_pid=2, stale_s=30) is None
    with db.write() as s:
        assert not old.heartbeat(s)
        old.set_busy(s, "written by an agent that no longer holds the name")
        old.stopped(s)
        assert held.heartbeat(s)
        row = hosts.get(s, "h")
        assert row is not None and row.busy_reason is None and row.stopped_at is None
        assert row.draining, "a drain mark survives the agent's restart"


def test_a_silent_or_stopped_holder_is_taken_over_with_a_warning(db):
    with db.write() as s:
        gone = register_host(s, "h", machine="vm-1", home="/srv/a")
        gone.stopped(s)
    with db.write() as s:
        held = hosts.Held("h", "new-vm")
        warning = hosts.register(s, held, hosts.AgentHome("vm-2", "/srv/a"), tpu_type="v4-8",
                                 chips=[0, 1], boot_id="b", agent_pid=3, stale_s=30)
    assert warning is not None and "was held by machine vm-1" in warning
    with db.write() as s:
        assert held.heartbeat(s) and not gone.heartbeat(s)
    with db.write() as s:  # silent: stale at once with stale_s 0
        assert hosts.register(s, hosts.Held("h", "third"), hosts.AgentHome("vm-3", "/x"),
                              tpu_type=None, chips=[0], boot_id="c", agent_pid=4,
                              stale_s=0.0) is not None
        assert not held.heartbeat(s)


def test_forget_removes_only_a_host_that_is_gone(db):
    with db.write() as s:
        held = register_host(s, "h", machine="vm-1", home="/srv/a")
    with pytest.raises(hosts.HostLive, match="host h is alive .*stop its agent first"), \
            db.write() as s:
        hosts.forget(s, "h", stale_s=30)
    with db.write() as s:
        held.stopped(s)
        assert hosts.forget(s, "h", stale_s=30)
        assert hosts.get(s, "h") is None
        assert not hosts.forget(s, "h", stale_s=30)
        assert not held.heartbeat(s), "a forgotten host's agent learns it on its next beat"


def test_a_host_that_stopped_renewing_gets_no_work_until_it_beats_again(db):
    from tpuq.state import queries

    with db.write() as s:
        held = register_host(s, "h", machine="vm-1", home="/srv/a")
        hosts.mark_lost(s, ["h"])
    with db.read() as s:
        row, now = hosts.get(s, "h"), queries.now(s)
        assert hosts.out_of_service(row, now, stale_s=3600, min_code=None) == \
            "lost: its leases ran out; no work until it is heard from"
    with db.write() as s:
        assert held.heartbeat(s)
    with db.read() as s:
        assert hosts.out_of_service(hosts.get(s, "h"), queries.now(s), stale_s=3600, min_code=None) is None


def test_a_handed_over_host_takes_no_work_until_a_new_agent_registers(db):
    from tpuq.state import queries

    with db.write() as s:
        held = register_host(s, "h", machine="vm-1", home="/srv/a")
        held.stopped(s, handover_s=300)
    with db.read() as s:
        assert hosts.out_of_service(hosts.get(s, "h"), queries.now(s), 3600, None) == \
            "handed over: its jobs wait for a new agent"
    with db.write() as s:
        register_host(s, "h", machine="vm-1", home="/srv/a")
    with db.read() as s:
        row = hosts.get(s, "h")
        assert row.handover_until is None and row.stopped_at is None
        assert hosts.out_of_service(row, queries.now(s), 3600, None) is None
