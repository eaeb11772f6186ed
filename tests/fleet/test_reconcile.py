"""The decision for one member, pure: what it records, calls and says."""

from __future__ import annotations

from tests.fleet.rig import slot
from tpuq.fleet.port import ApiError, ErrorKind, NodeView, OpView, QueuedView
from tpuq.fleet.reconcile import (
    Call,
    Member,
    Policy,
    Seen,
    after_call,
    backoff_s,
    decide,
    retired,
)

P = Policy(backoff_s=30.0, backoff_max_s=600.0, join_s=300.0)
SPEC = slot()
T = 1000.0


def node(state: str = "READY", health: str = "HEALTHY") -> NodeView:
    return NodeView("tpuq-v4-0-g1", state, health, {"tpuq-fleet": "tpuq"})


def test_a_ready_vm_whose_agent_does_not_register_is_told_apart_after_the_timeout() -> None:
    up = decide(Member("v4", 0, phase="creating"), SPEC, Seen(node()), T, P)
    assert up.vm_up and up.member.phase == "up" and up.member.ready_at == T
    early = decide(up.member, SPEC, Seen(node()), T + 100, P)
    assert early.member.waiting_for == "its agent to register"
    late = decide(up.member, SPEC, Seen(node()), T + 400, P)
    assert late.member.waiting_for.startswith("its agent: READY for 7 min and not registered")
    joined = decide(late.member, SPEC, Seen(node(), joined=True), T + 401, P)
    assert joined.member.waiting_for is None and joined.member.joined_at == T + 401


def test_a_preempted_vm_loses_its_hosts_once_and_is_deleted() -> None:
    m = decide(Member("v4", 0, phase="creating"), SPEC, Seen(node()), T, P).member
    dead = decide(m, SPEC, Seen(node("PREEMPTED")), T + 10, P)
    assert (dead.call, dead.lose, dead.vm_gone) == (Call.DELETE_NODE, "VM PREEMPTED",
                                                    "VM PREEMPTED")
    again = decide(dead.member, SPEC, Seen(node("DELETING")), T + 20, P)
    assert again.call is None and again.lose is None
    gone = decide(again.member, SPEC, Seen(), T + 30, P)
    assert gone.call is Call.CREATE and gone.member.generation == 2


def test_a_suspended_queued_resource_is_force_deleted() -> None:
    spec = slot(queued=True)
    qr = QueuedView("tpuq-v4-0-g1", "SUSPENDED", {"tpuq-fleet": "tpuq"})
    step = decide(Member("v4", 0, phase="up"), spec, Seen(None, qr), T, P)
    assert step.call is Call.DELETE_QUEUED and step.lose


def test_a_stockout_in_the_operation_backs_off_and_says_capacity() -> None:
    m = Member("v4", 0, phase="creating", op_name="op-1", tries=3)
    op = OpView("op-1", True, 8, 'There is no more capacity in the zone "us-central2-b"; ...')
    step = decide(m, SPEC, Seen(op=op), T, P)
    assert step.call is None and step.member.phase == "waiting"
    assert step.member.waiting_for == "capacity in us-central2-b"
    assert step.member.next_try_at == T + 120.0  # 30 s doubled for the third try


def test_a_quota_error_at_the_call_and_a_timeout_are_told_apart() -> None:
    m = Member("v4", 0, phase="creating", tries=1)
    quota = after_call(m, Call.CREATE, SPEC, ApiError(ErrorKind.QUOTA, "Quota limit x"), T, P, 1.0)
    assert quota.error_kind == "quota" and quota.generation == 1
    lost = after_call(m, Call.CREATE, SPEC, ApiError(ErrorKind.TRANSIENT, "timeout"), T, P, 1.0)
    assert lost.generation == 2, "a create with no answer never reuses its id"


def test_backoff_is_capped_and_what_a_person_must_fix_starts_high() -> None:
    assert backoff_s(ErrorKind.STOCKOUT, 1, P) == 30.0
    assert backoff_s(ErrorKind.STOCKOUT, 50, P) == 600.0
    assert backoff_s(ErrorKind.PERMISSION, 1, P) == 150.0
    assert backoff_s(ErrorKind.TRANSIENT, 1, P) == 3.0


def test_an_unknown_state_is_waited_on_never_acted_on() -> None:
    step = decide(Member("v4", 0, phase="up"), SPEC, Seen(node("SOMETHING_NEW")), T, P)
    assert step.call is None and step.lose is None
    assert "does not know (SOMETHING_NEW)" in step.member.waiting_for


def test_a_removed_member_is_deleted_then_retired_with_its_generation_used_up() -> None:
    step = decide(Member("v4", 0, phase="up"), None, Seen(node()), T, P)
    assert step.call is Call.DELETE_NODE and step.lose
    done = decide(step.member, None, Seen(), T + 10, P)
    assert retired(done.member) and done.member.generation == 2
    assert decide(done.member, None, Seen(), T + 20, P).member == done.member
