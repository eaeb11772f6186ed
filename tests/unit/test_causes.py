"""Why an attempt was interrupted, read from the very words the agent and the reaper
record (one classifier for /metrics and the timeline)."""

from __future__ import annotations

from tpuq.agent.gce.metadata import Notice, NoticeKind
from tpuq.state.aggregates import cause
from tpuq.state.attempts import Ending, effective_ending
from tpuq.state.states import Outcome
from tpuq.web.data import mark_of

EXITED = Ending(Outcome.REQUEUED, "exited with code 75")


def stopped(why: str) -> str:
    """The reason an attempt stopped by a preempt request records (attempts.py)."""
    return effective_ending("preempt", EXITED, why).reason


def test_each_cause_from_the_words_recorded() -> None:
    notice = Notice(NoticeKind.MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
    upcoming = Notice(NoticeKind.UPCOMING, "SCHEDULED", "2026-11-26T10:00:00Z")
    spot = Notice(NoticeKind.PREEMPTED, "TRUE")
    assert cause("preempted", stopped(f"host notice: {notice}")) == "maintenance"
    assert cause("preempted", stopped(f"host notice: {upcoming}")) == "maintenance"
    assert cause("preempted", stopped(f"host notice: {spot}")) == "spot"
    assert cause("preempted", stopped("preempt requested by alice")) == "requested"
    assert cause("preempted", stopped("agent stopping")) == "agent_stop"
    assert cause("preempted", "host rebooted") == "reboot"
    assert cause("lost", "agent restarted before the job started") == "reboot"
    assert cause("lost", "lease expired: host tpu-a stopped answering") == "host_lost"
    assert cause("preempted", stopped("something new")) == "other"


def test_the_timeline_marks_maintenance_preemptions_and_failures() -> None:
    notice = Notice(NoticeKind.MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
    assert mark_of("preempted", stopped(f"host notice: {notice}")) == "maintenance"
    assert mark_of("lost", "lease expired: host h stopped answering") == "preemption"
    assert mark_of("failed", "exited with code 3") == "failure"
    assert mark_of("succeeded", "exited with code 0") is None
