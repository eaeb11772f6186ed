"""The leader records its scheduling passes with its lease renewal (what /metrics reads
as tpuq_scheduler_pass_seconds): counted from 0 for each tenure."""

from __future__ import annotations

from tpuq.scheduler.passes import ROLE, Scheduler
from tpuq.settings import Settings
from tpuq.state import aggregates


def test_passes_are_recorded_with_the_lease(db) -> None:  # type: ignore[no-untyped-def]
    sched = Scheduler(db, Settings(home="/tmp", host="h"), "agent-1", dispatch=lambda *a: None)
    sched.keep_lease()
    for _ in range(3):
        sched.run_pass()
    with db.read() as s:
        before = aggregates.scheduler_passes(s, ROLE)
    assert before.pass_count == 0  # written with the next renewal, not by each pass
    sched.keep_lease()
    with db.read() as s:
        row = aggregates.scheduler_passes(s, ROLE)
    assert row.pass_count == 3
    assert row.pass_seconds_sum >= row.pass_seconds_last > 0
    sched.resign()
    sched.keep_lease()  # a new tenure
    with db.read() as s:
        assert aggregates.scheduler_passes(s, ROLE).pass_count == 0
