"""An array's tasks as rows: what one bulk insert writes is what a submit of each would."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tpuq.arrays import INDEX, checked_tasks
from tpuq.spec import JobSpec, SpecError
from tpuq.state import jobs
from tpuq.state.models import Job, JobEvent


def _spec(**more) -> JobSpec:
    fields = {"command": ["/bin/echo", "hi"], "cwd": "/tmp", "owner": "ann", "team": "t",
              "env": {"PATH": "/usr/bin", "QUOTE": 'a "b" \\ ü\n', INDEX: "7"}}
    return JobSpec(**{**fields, **more})


def test_each_task_row_is_its_spec_with_its_index_and_one_array_id(db):
    indices = [3, 10, 0, 12345]
    args = [["a"], [], ["b", "c d"], ["é"]]
    with db.write() as s:
        ids = jobs.submit_array(s, checked_tasks(_spec(), indices, args), throttle=2,
                                actor="ann")
    assert len(set(ids)) == 4
    with db.read() as s:
        rows = {r.id: r for r in s.scalars(select(Job).where(Job.id.in_(ids)))}
        events = {e.job_id: e for e in s.scalars(select(JobEvent).where(
            JobEvent.job_id.in_(ids)))}
    for job_id, index, extra in zip(ids, indices, args, strict=True):
        row = rows[job_id]
        assert row.array_id == ids[0] and row.array_index == index
        assert row.array_throttle == 2 and row.state == "queued"
        assert row.command == ["/bin/echo", "hi", *extra]
        assert row.env == {"PATH": "/usr/bin", "QUOTE": 'a "b" \\ ü\n', INDEX: str(index)}
        assert events[job_id].to_state == "queued"
        assert events[job_id].reason == f"submitted (array {ids[0]}, task {index})"


def test_a_held_array_without_args_and_an_empty_environment(db):
    with db.write() as s:
        ids = jobs.submit_array(s, checked_tasks(_spec(env={}), [0, 1], []), throttle=None,
                                held=True)
    with db.read() as s:
        rows = s.scalars(select(Job).where(Job.id.in_(ids)).order_by(Job.id)).all()
    assert [r.env for r in rows] == [{INDEX: "0"}, {INDEX: "1"}]
    assert {r.state for r in rows} == {"held"}
    assert all(r.command == ["/bin/echo", "hi"] for r in rows)


def test_the_task_with_the_longest_index_is_checked_in_full():
    from tpuq.spec import MAX_ENV

    base = {"A": "x" * (MAX_ENV - len("A") - len(INDEX) - 2)}  # room for a 2-digit index
    checked_tasks(_spec(env=base), list(range(10, 99)), [])
    with pytest.raises(SpecError, match="environment"):
        checked_tasks(_spec(env=base), [5, 100, 7], [])


@pytest.mark.parametrize("indices, args, message", [
    ([], [], "1 to"),
    ([1, 2], [["a"]], "argument lines"),
    ([1, -1], [], "whole numbers"),
    ([1, True], [], "whole numbers"),
    (["1"], [], "whole numbers"),
    ([0, 1], [["ok"], ["bad\x00"]], "NUL"),
    ([0], [[1]], "text"),
    ([4, 2, 4], [], "twice"),
])
def test_task_mistakes_are_refused(indices, args, message):
    with pytest.raises(SpecError, match=message):
        checked_tasks(_spec(), indices, args)


# and row_version: the database's count of a row's updates (an array's task is given its
# array's id by one, after the insert)
_WRITTEN_PER_JOB = {"id", "array_id", "array_index", "array_throttle", "submitted_at",
                    "updated_at", "row_version"}


def test_every_column_of_a_task_is_what_submitting_its_own_spec_writes(db):
    """The bulk statement writes the shared values once for every index (typed by the
    table on PostgreSQL, by each column's type on SQLite): each task's row, column by
    column, is the row `jobs.submit` writes for that task alone."""
    spec = _spec(name="sweep", priority=-3, chips=2, tpu_type="v4-8", stop_signal="SIGINT",
                 grace_s=12.5, time_limit_s=3600.0, max_retries=2, requeue_on_preempt=False,
                 tcmalloc=False, notify="end,fail", notify_to="json://h/p\nmailto://a@b",
                 env_dropped=["SSH_AUTH_SOCK"], begin_at=1.8e9, output="/tmp/%j.out",
                 option_sources={"--chips": "#TPUQ", "--name": "command line"})
    tasks = checked_tasks(spec, [5, 0, 17], [["x"], [], ["y", "z"]])
    with db.write() as s:
        ids = jobs.submit_array(s, tasks, throttle=None, actor="ann")
        alone = [jobs.submit(s, tasks.spec_of(n), actor="ann") for n in range(3)]
    with db.read() as s:
        got = {r.id: r for r in s.scalars(select(Job).where(Job.id.in_(ids + alone)))}
    columns = [c.key for c in Job.__table__.columns if c.key not in _WRITTEN_PER_JOB]
    for task, single in zip(ids, alone, strict=True):
        assert {c: getattr(got[task], c) for c in columns} == \
            {c: getattr(got[single], c) for c in columns}
    assert [got[i].array_index for i in ids] == [5, 0, 17]
