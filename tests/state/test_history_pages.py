"""A long history read a page at a time, and searched in the database."""

from __future__ import annotations

from sqlalchemy import update

from tpuq.spec import JobSpec
from tpuq.state import history, jobs
from tpuq.state.models import Job


def test_pages_of_the_newest_and_a_search_that_is_not_a_pattern(db) -> None:  # type: ignore[no-untyped-def]
    with db.write() as s:
        ids = []
        for i in range(7):
            spec = JobSpec(command=["python", f"sweep_{i}.py"], cwd="/", env={}, owner="u",
                           team="t", grace_s=1.0, name="100%_done" if i == 3 else None)
            j = jobs.submit(s, spec.validate(), actor="u")
            s.execute(update(Job).where(Job.id == j).values(state="succeeded", ended_at=1000.0 + i))
            ids.append(j)

    def page(**kw):  # type: ignore[no-untyped-def]
        with db.read() as s:
            return [r["id"] for r in history.ended(s, since=None, until=None, user=None,
                                                   team=None, states=[], **kw)]

    assert page() == ids  # everything, oldest first, as `tpuq history`
    assert page(newest=3) == ids[4:]
    assert page(newest=3, skip=3) == ids[1:4]
    assert page(match="SWEEP_5") == [ids[5]]  # in the command, any case
    assert page(match="100%_") == [ids[3]]  # % and _ are text, not wildcards
    assert page(match="0%_d", newest=1) == [ids[3]]
