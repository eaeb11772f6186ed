"""Bulk commands on the waiting jobs: set-based through transitions.transition_many, with
what a one-by-one change writes (compare-and-set, an event per job, the owner's
notification), on both databases."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tpuq import arrays
from tpuq.spec import JobSpec
from tpuq.state import jobs
from tpuq.state.models import Job, JobEvent, Notification
from tpuq.state.states import JobState
from tpuq.state.transitions import CHUNK, InvalidTransition, transition_many


def submit(db, n: int, held: bool = False, **kw) -> list[int]:
    spec = JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t", **kw)
    with db.write() as s:
        return jobs.submit_array(s, arrays.checked_tasks(spec, list(range(n)), []), None,
                                 held=held)


def states(db, ids: list[int]) -> dict[int, str]:
    with db.read() as s:
        return dict(s.execute(select(Job.id, Job.state).where(Job.id.in_(ids))).all())


def test_many_jobs_change_with_an_event_each_and_only_from_the_state_named(db):
    ids = submit(db, CHUNK * 2 + 5)  # more than one chunk
    with db.write() as s:  # one of them moved on meanwhile: fenced out
        jobs.hold(s, ids[3], "admin")
    with db.write() as s:
        changed = transition_many(s, ids, JobState.QUEUED, JobState.CANCELLED,
                                  reason="cancelled by u", actor="u")
    assert sorted(changed) == sorted(set(ids) - {ids[3]})
    assert states(db, ids) == {**{j: "cancelled" for j in ids}, ids[3]: "held"}
    with db.read() as s:
        events = s.execute(select(JobEvent.job_id, JobEvent.from_state, JobEvent.actor)
                           .where(JobEvent.to_state == "cancelled")).all()
    assert sorted(e.job_id for e in events) == sorted(changed)
    assert {(e.from_state, e.actor) for e in events} == {("queued", "u")}


def test_a_transition_the_state_machine_forbids_raises(db):
    ids = submit(db, 2)
    with db.write() as s, pytest.raises(InvalidTransition):
        transition_many(s, ids, JobState.QUEUED, JobState.SUCCEEDED, reason="r", actor="u")


def test_an_owner_who_asked_to_hear_of_the_end_is_told_of_each(db):
    told = submit(db, 3, notify="end", notify_to="json://127.0.0.1:9/x")
    quiet = submit(db, 2)
    with db.write() as s:
        transition_many(s, told + quiet, JobState.QUEUED, JobState.CANCELLED,
                        reason="cancelled by u", actor="u")
    with db.read() as s:
        rows = s.execute(select(Notification.job_id, Notification.event)).all()
    assert sorted(rows) == [(j, "cancelled") for j in told]


def test_act_on_many_mixes_bulk_and_one_by_one_and_keeps_the_order(db):
    queued, held = submit(db, 5), submit(db, 5, held=True)
    with db.write() as s:
        jobs.cancel(s, queued[0], "u")
    order = [held[2], queued[0], 999_999, *queued[1:], *held]
    with db.write() as s:
        results = jobs.act_on_many(s, "cancel", order, "u")
    assert [r.job_id for r in results] == order
    said = {r.job_id: (r.ok, r.message) for r in results}
    assert said[queued[0]] == (False, "already cancelled")
    assert said[999_999] == (False, "does not exist")
    assert all(said[j] == (True, "cancelled") for j in [*queued[1:], *held])
    assert set(states(db, queued + held).values()) == {"cancelled"}
    with db.write() as s:
        results = jobs.act_on_many(s, "release", held, "u")
    assert {r.message for r in results} == {"is cancelled, not held"}
