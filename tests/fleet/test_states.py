"""Every state the client library's enums can report has a verdict: a state the API adds
fails this test instead of going unhandled."""

from __future__ import annotations

from google.cloud import tpu_v2

from tpuq.fleet import states


def names(enum: type) -> set[str]:
    return set(enum.__members__)


def test_every_node_state_is_handled() -> None:
    assert names(tpu_v2.Node.State) == set(states.NODE_STATES)


def test_every_node_health_is_handled() -> None:
    assert names(tpu_v2.Node.Health) == set(states.NODE_HEALTH)


def test_every_queued_resource_state_is_handled() -> None:
    assert names(tpu_v2.QueuedResourceState.State) == set(states.QUEUED_STATES)


def test_what_is_deleted_and_made_anew() -> None:
    dead = {n for n, v in states.NODE_STATES.items() if v is states.Verdict.DEAD}
    assert {"PREEMPTED", "TERMINATED"} <= dead
    qdead = {n for n, v in states.QUEUED_STATES.items() if v is states.Verdict.DEAD}
    assert {"SUSPENDED", "FAILED"} <= qdead


def test_a_state_this_tpuq_does_not_know_is_waited_on_never_acted_on() -> None:
    assert states.node_verdict("SOMETHING_NEW") is states.Verdict.UNSEEN
    assert states.queued_verdict("SOMETHING_NEW") is states.Verdict.UNSEEN
