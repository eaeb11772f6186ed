"""`status`'s table reads an array's waiting tasks as one row: only the first task of each
array and state whole, the indices of all (both databases)."""

from __future__ import annotations

from tpuq import arrays
from tpuq.spec import JobSpec
from tpuq.state import jobs, queries


def test_waiting_tasks_fold_into_their_first_per_state_and_the_rest_is_whole(db):
    spec = JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t")
    with db.write() as s:
        plain = jobs.submit(s, spec)
        a = jobs.submit_array(s, arrays.checked_tasks(spec, [0, 1, 2, 3, 4], []), None)
        b = jobs.submit_array(s, arrays.checked_tasks(spec, [7, 8, 9], []), None, held=True)
        jobs.hold(s, a[3], "u")
        jobs.cancel(s, a[4], "u")  # ended: listed among the recent, never folded
    with db.read() as s:
        folded: dict[int, list[int]] = {}
        rows = queries.list_jobs(s, folded=folded)
        every = queries.list_jobs(s)
    assert folded == {a[0]: [0, 1, 2], a[3]: [3], b[0]: [7, 8, 9]}
    assert [r.id for r in rows] == sorted([plain, a[0], a[3], a[4], b[0]])
    assert len(every) == 9
    with db.read() as s:
        folded = {}
        rows = queries.list_jobs(s, states=["held"], folded=folded)
    assert folded == {a[3]: [3], b[0]: [7, 8, 9]}
    assert [r.id for r in rows] == [a[3], b[0]]
