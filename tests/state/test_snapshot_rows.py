"""A pass reads queued jobs through the DBAPI cursor (snapshot.QueuedRow): the values are
those the ORM reads for the same columns, of the same Python types, on both databases."""

from __future__ import annotations

from tpuq.spec import JobSpec
from tpuq.state import jobs, snapshot
from tpuq.state.models import Job


def test_a_queued_row_holds_what_the_orm_reads(db) -> None:  # type: ignore[no-untyped-def]
    with db.write() as s:
        plain = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"))
        full = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="ann", team="vision",
                                      chips=2, tpu_type="v4-8", priority=-3,
                                      time_limit_s=90.5, begin_at=4_000_000_000.25))
        held = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"),
                           held=True)
    with db.read() as s:
        snap = snapshot.read(s, host_stale_s=30.0, half_life_h=168.0)
        orm = {j.id: j for j in s.query(Job)}
        rows = {r.id: r for r in snap.queued}
        assert set(rows) == {plain, full}, "queued jobs only"
        assert held not in rows
        for job_id, row in rows.items():
            assert type(row) is snapshot.QueuedRow
            want = tuple(getattr(orm[job_id], name) for name in snapshot.QueuedRow._fields)
            assert tuple(row) == want
            assert [type(v) for v in row] == [type(v) for v in want], row
        assert isinstance(rows[full].submitted_at, float)
        assert (rows[full].chips, rows[full].priority, rows[full].time_limit_s,
                rows[full].begin_at) == (2, -3, 90.5, 4_000_000_000.25)
