"""A pass reads queued jobs through the DBAPI cursor (snapshot.QueuedRow): the values are
those the ORM reads for the same columns, of the same Python types, on both databases."""

from __future__ import annotations

from sqlalchemy import select

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


# a value for each queued column a job submitted with no options leaves empty
_SET = {"chips": 2, "tpu_type": "v4-8", "not_before": 1.5, "time_limit_s": 60.0,
        "array_id": 1, "array_throttle": 2, "workers": 2, "checkpoint_dir": "/c",
        "checkpoint_host": "h", "checkpoint_seen_at": 3.0, "begin_at": 4.0}


def _changed(value: object, column: str) -> object:
    if value is None:
        return _SET[column]
    if isinstance(value, str):
        return value + "x"
    return value + 1  # int or float


def _full(db) -> list[tuple]:  # type: ignore[no-untyped-def]
    with db.read() as s:
        return [tuple(r) for r in snapshot.read(s, host_stale_s=30.0, half_life_h=168.0).queued]


def _kept(db, cache) -> list[snapshot.QueuedRow]:  # type: ignore[no-untyped-def]
    with db.read() as s:
        return snapshot.read(s, host_stale_s=30.0, half_life_h=168.0, queue=cache).queued


def test_a_kept_queue_rereads_every_row_that_moved_whatever_moved_it(db) -> None:  # type: ignore[no-untyped-def]
    """A scheduler keeps the queued rows it read and rereads only those whose version
    moved. The version is the database's (a trigger), so any write of any column by any
    writer is seen: each column a pass reads is changed here by a plain UPDATE, as no
    tpuq path writes it, and the kept read must equal a full one after each."""
    from sqlalchemy import update

    with db.write() as s:
        ids = [jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"))
               for _ in range(6)]
        held = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"),
                           held=True)
    cache: snapshot.QueueCache = {}
    assert [tuple(r) for r in _kept(db, cache)] == _full(db)
    target = ids[2]
    for column in snapshot.QueuedRow._fields[1:]:
        with db.read() as s:
            now = s.execute(select(getattr(Job, column)).where(Job.id == target)).scalar_one()
        with db.write() as s:
            s.execute(update(Job).where(Job.id == target)
                      .values({column: _changed(now, column)}))
        got = [tuple(r) for r in _kept(db, cache)]
        assert got == _full(db), f"a change of {column} was not seen"
    # jobs that leave the queue and join it, by a state of their own or a new row
    with db.write() as s:
        s.execute(update(Job).where(Job.id == ids[0]).values(state="held"))
        s.execute(update(Job).where(Job.id == held).values(state="queued"))
        new = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"))
    got = _kept(db, cache)
    assert [tuple(r) for r in got] == _full(db)
    assert {r.id for r in got} == (set(ids) - {ids[0]}) | {held, new}
    # one that left and comes back, moved meanwhile, is read again too
    with db.write() as s:
        s.execute(update(Job).where(Job.id == ids[0]).values(state="queued"))
    assert [tuple(r) for r in _kept(db, cache)] == _full(db)


def test_jobs_that_left_the_queue_are_forgotten_once_they_outnumber_it() -> None:
    """Not each pass (a scan of the whole queue each time): a pass looks its rows up by
    id, so the others only take room until then."""
    row = snapshot.QueuedRow._make([0] * len(snapshot.QueuedRow._fields))
    queue = [row._replace(id=i) for i in range(10)]
    cache = {i: (0, row._replace(id=i)) for i in range(2 * 10 + 64)}
    snapshot.prune(cache, queue)
    assert len(cache) == 2 * 10 + 64, "not yet"
    cache[1000] = (0, row._replace(id=1000))
    snapshot.prune(cache, queue)
    assert set(cache) == set(range(10))


def test_a_kept_queue_reads_again_only_the_rows_that_moved(db) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import update

    with db.write() as s:
        ids = [jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"))
               for _ in range(6)]
    cache: snapshot.QueueCache = {}
    first = {r.id: r for r in _kept(db, cache)}
    again = {r.id: r for r in _kept(db, cache)}
    assert all(again[i] is first[i] for i in ids), "nothing moved: nothing read again"
    with db.write() as s:
        s.execute(update(Job).where(Job.id == ids[1]).values(priority=7))
    third = {r.id: r for r in _kept(db, cache)}
    assert third[ids[1]].priority == 7
    assert [i for i in ids if third[i] is not first[i]] == [ids[1]]
    # most of the queue moved: every row is read in one statement, and all are right
    with db.write() as s:
        s.execute(update(Job).where(Job.id.in_(ids[:4])).values(priority=9))
    assert [tuple(r) for r in _kept(db, cache)] == _full(db)


def test_every_update_of_a_job_row_moves_its_version_by_one(db) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import update

    with db.write() as s:
        job_id = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"))
    for want in (1, 2):
        with db.write() as s:
            changed = s.execute(update(Job).where(Job.id == job_id).values(priority=want))
            assert changed.rowcount == 1, "the trigger's own change is not counted"
        with db.read() as s:
            assert s.execute(select(Job.row_version).where(Job.id == job_id)).scalar_one() \
                == want
