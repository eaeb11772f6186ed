"""The state machine: every allowed move works, every other is refused, all are fenced."""

from __future__ import annotations

import itertools
import time

import pytest
from sqlalchemy import select

from tests.state.rows import register_host
from tpuq.scheduler.passes import Scheduler
from tpuq.scheduler.reaper import Reaper
from tpuq.settings import Settings
from tpuq.spec import JobSpec
from tpuq.state import attempts, jobs, snapshot
from tpuq.state.attempts import Ending
from tpuq.state.models import Allocation, Attempt, Job, JobEvent, Notification
from tpuq.state.states import ALLOWED, TERMINAL, JobState, Outcome, StopRequest, allowed
from tpuq.state.transitions import InvalidTransition, transition

EXPECTED = {
    ("queued", "assigned"), ("queued", "held"), ("queued", "cancelled"),
    ("held", "queued"), ("held", "cancelled"),
    ("assigned", "running"), ("assigned", "queued"), ("assigned", "cancelled"),
    ("running", "succeeded"), ("running", "failed"), ("running", "cancelled"),
    ("running", "timeout"), ("running", "preempting"), ("running", "queued"),
    ("preempting", "queued"), ("preempting", "cancelled"), ("preempting", "timeout"),
    ("preempting", "succeeded"), ("preempting", "failed"), ("preempting", "preempting"),
}


@pytest.mark.parametrize("frm, to", list(itertools.product(JobState, JobState)))
def test_every_pair_is_allowed_or_refused_as_designed(frm, to):
    assert allowed(frm, to) == ((frm.value, to.value) in EXPECTED)


def test_terminal_states_are_final():
    assert all(not ALLOWED[s] for s in TERMINAL)


def spec(**kw):
    return JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t", **kw)


def new_job(db, **kw) -> int:
    with db.write() as s:
        return jobs.submit(s, spec(**kw))


def test_refused_transition_raises_before_touching_the_row(db):
    job_id = new_job(db)
    with db.write() as s, pytest.raises(InvalidTransition):
        transition(s, job_id, [JobState.QUEUED], JobState.SUCCEEDED)


def test_transition_is_compare_and_set_and_writes_an_event(db):
    job_id = new_job(db)
    with db.write() as s:
        assert transition(s, job_id, [JobState.QUEUED], JobState.HELD, reason="r", actor="a")
        assert not transition(s, job_id, [JobState.QUEUED], JobState.HELD), "state moved on"
    with db.read() as s:
        events = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id)).all()
    assert [(e.from_state, e.to_state) for e in events] == [(None, "queued"), ("queued", "held")]


def test_attempt_is_the_fencing_token(db):
    job_id = new_job(db)
    with db.write() as s:
        a1 = attempts.assign(s, job_id, 0, "h", [0, 1], lease_s=30)
    with db.write() as s:
        assert attempts.start(s, job_id, a1, "h", boot_id="b", log_path="/l", lease_s=30)
        assert not attempts.start(s, job_id, a1, "h", boot_id="b", log_path="/l", lease_s=30), \
            "duplicate doorbell"
    with db.write() as s:  # the host went silent; the reaper requeued it
        assert attempts.finish(s, job_id, a1, "h", Ending(Outcome.LOST, "lease"),
                               retry_backoff_s=0) == JobState.QUEUED
        a2 = attempts.assign(s, job_id, a1, "h2", [0], lease_s=30)
    with db.write() as s:  # the old attempt wakes up: every write it tries is refused
        assert not attempts.renew(s, job_id, a1, "h", 30).held
        assert attempts.finish(s, job_id, a1, "h", Ending(Outcome.SUCCEEDED, "x"),
                               retry_backoff_s=0) is None
        assert not attempts.start(s, job_id, a1, "h", boot_id="b", log_path="/l", lease_s=30)
        assert attempts.renew(s, job_id, a2, "h2", 30).held


def test_database_refuses_double_booking_a_chip(db):
    a, b = new_job(db), new_job(db)
    with db.write() as s:
        attempts.assign(s, a, 0, "h", [0, 1], lease_s=30)
    with pytest.raises(Exception, match="(?i)unique|duplicate"):
        with db.write() as s:
            attempts.assign(s, b, 0, "h", [1, 2], lease_s=30)
    with db.read() as s:
        assert s.get(Job, b).state == "queued", "the failed assignment rolled back whole"
        assert sorted(s.scalars(select(Allocation.chip))) == [0, 1]


def run_to(db, job_id, outcome, host_retries=attempts.HOST_RETRIES, **kw):
    with db.write() as s:
        n = attempts.assign(s, job_id, s.get(Job, job_id).attempt, "h", [0], lease_s=30)
    with db.write() as s:
        attempts.start(s, job_id, n, "h", boot_id="b", log_path="/l", lease_s=30)
    with db.write() as s:
        return attempts.finish(s, job_id, n, "h", Ending(outcome, "why", **kw), retry_backoff_s=0,
                               host_retries=host_retries)


def test_host_problems_in_a_row_requeue_a_job_only_so_often_then_fail_it(db):
    """No silent loop: a TPU that never starts (or a host that keeps vanishing) is not
    the job's fault, but after host_retries of them in a row the next one fails the job,
    with the reason, so its owner hears of it."""
    job_id = new_job(db, max_retries=5, notify="fail", notify_to="json://127.0.0.1:9/")
    for outcome in (Outcome.HOST_ERROR, Outcome.LOST):
        assert run_to(db, job_id, outcome, host_retries=2) == JobState.QUEUED
    assert run_to(db, job_id, Outcome.HOST_ERROR, host_retries=2) == JobState.FAILED
    with db.read() as s:
        job = s.get(Job, job_id)
        told = s.query(Notification).filter_by(job_id=job_id).all()
    assert job.failures == 1 and "3 host problems in a row" in job.reason
    assert "why" in job.reason, "the runtime's own words stay in the reason"
    assert [n.event for n in told] == ["failed"]


def test_any_other_outcome_ends_the_streak_of_host_problems(db):
    job_id = new_job(db)
    for outcome in (Outcome.HOST_ERROR, Outcome.HOST_ERROR, Outcome.PREEMPTED,
                    Outcome.HOST_ERROR, Outcome.HOST_ERROR):
        assert run_to(db, job_id, outcome, host_retries=2) == JobState.QUEUED


def test_failures_retry_until_max_retries_then_fail(db):
    job_id = new_job(db, max_retries=2)
    assert run_to(db, job_id, Outcome.FAILED, exit_code=1) == JobState.QUEUED
    assert run_to(db, job_id, Outcome.FAILED, exit_code=1) == JobState.QUEUED
    assert run_to(db, job_id, Outcome.FAILED, exit_code=1) == JobState.FAILED
    with db.read() as s:
        assert s.get(Job, job_id).failures == 3


def test_preemption_and_requeue_never_use_up_retries(db):
    job_id = new_job(db, max_retries=0)
    for outcome in (Outcome.PREEMPTED, Outcome.REQUEUED, Outcome.HOST_ERROR, Outcome.LOST):
        assert run_to(db, job_id, outcome) == JobState.QUEUED
    with db.read() as s:
        job = s.get(Job, job_id)
    assert job.failures == 0 and job.preemptions == 1 and job.attempt == 4


def test_preempted_job_with_no_requeue_ends(db):
    job_id = new_job(db, requeue_on_preempt=False)
    assert run_to(db, job_id, Outcome.PREEMPTED) == JobState.FAILED


def test_stop_request_decides_the_outcome_whatever_the_exit(db):
    job_id = new_job(db)
    with db.write() as s:
        n = attempts.assign(s, job_id, 0, "h", [0], lease_s=30)
    with db.write() as s:
        attempts.start(s, job_id, n, "h", boot_id="b", log_path="/l", lease_s=30)
        assert jobs.cancel(s, job_id, "me").ok
        assert attempts.renew(s, job_id, n, "h", 30).stop_request == "cancel"
    with db.write() as s:
        end = Ending(Outcome.SUCCEEDED, "exited 0", exit_code=0)
        assert attempts.finish(s, job_id, n, "h", end, retry_backoff_s=0) == JobState.CANCELLED


def test_reaper_takes_only_leases_still_expired_a_grace_later(db):
    """After a database outage every lease looks expired: a host that renews within the
    grace keeps its job; a host that stays silent loses it."""
    live, dead = new_job(db), new_job(db)
    with db.write() as s:
        for job_id, host in ((live, "h1"), (dead, "h2")):
            n = attempts.assign(s, job_id, 0, host, [], lease_s=-1)  # expired at once
            assert attempts.start(s, job_id, n, host, boot_id="b", log_path="/l", lease_s=-1)
    sched = Scheduler(db, Settings(lease_s=0.3), "leader", dispatch=lambda *_: None)
    sched.keep_lease()
    assert sched.leading
    reaper = Reaper(db, sched.settings, sched.has_lease)
    assert reaper.reap() == [], "a first sight of an expired lease is only a suspect"
    with db.write() as s:
        assert attempts.renew(s, live, 1, "h1", 30).held  # h1 is back and renews
    with db.write() as s:
        assert attempts.expired_leases(s) == {(dead, 1)}
    requeued = wait_for_reap(reaper)
    assert requeued == [dead]
    with db.read() as s:
        assert s.get(Job, live).state == "running"
        assert s.get(Job, dead).state == "queued"


def wait_for_reap(reaper: Reaper) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if done := reaper.reap():
            return done
        time.sleep(0.05)  # polling the reaper, as its ticker does; the grace is 0.1 s
    raise AssertionError("the reaper never took the silent host's job")


def test_start_outside_a_transaction_is_atomic_and_a_refusal_changes_nothing(db):
    """Database.single runs start() without BEGIN/COMMIT on PostgreSQL: the attempt row
    must change only together with the job row, and not at all when the CAS is refused."""
    other, job_id = new_job(db), new_job(db)
    with db.write() as s:  # another job's attempt rows first: start must return its own chips
        attempts.assign(s, other, 0, "h", [0, 1], lease_s=30)
        n = attempts.assign(s, job_id, 0, "h", [2, 3], lease_s=30)
    with db.single() as s:  # a stale doorbell (wrong host): refused
        assert attempts.start(s, job_id, n, "other", boot_id="x", log_path="/x", lease_s=30) is None
    with db.read() as s:
        att = s.scalars(select(Attempt).where(Attempt.job_id == job_id)).one()
        assert (att.boot_id, att.started_at) == (None, None), "a refused start wrote nothing"
    with db.single() as s:
        row = attempts.start(s, job_id, n, "h", boot_id="b", log_path="/l", lease_s=30)
    assert row is not None and list(row.chips) == [2, 3] and row.command == ["/bin/true"]
    with db.read() as s:
        att = s.scalars(select(Attempt).where(Attempt.job_id == job_id)).one()
        assert (att.boot_id, att.log_path) == ("b", "/l") and att.started_at is not None
        assert s.get(Job, job_id).state == "running"
        events = s.scalars(select(JobEvent.to_state).where(JobEvent.job_id == job_id)).all()
        assert events == ["queued", "assigned", "running"]


def test_finish_writes_attempt_and_frees_chips_with_the_state(db):
    job_id = new_job(db)
    with db.write() as s:
        n = attempts.assign(s, job_id, 0, "h", [0, 1], lease_s=30)
        assert attempts.start(s, job_id, n, "h", boot_id="b", log_path="/l", lease_s=30)
    with db.write() as s:
        assert attempts.finish(s, job_id, n, "h", Ending(Outcome.SUCCEEDED, "exit 0", 0),
                               retry_backoff_s=0) \
            == JobState.SUCCEEDED
    with db.read() as s:
        att = s.scalars(select(Attempt).where(Attempt.job_id == job_id)).one()
        assert (att.outcome, att.exit_code, att.reason) == ("succeeded", 0, "exit 0")
        assert att.ended_at is not None
        assert s.scalars(select(Allocation)).all() == []


def test_snapshot_sees_each_hosts_booked_chips(db):
    with db.write() as s:
        for name in ("h1", "h2", "h3"):
            register_host(s, name)
    a, b = new_job(db), new_job(db)
    with db.write() as s:
        attempts.assign(s, a, 0, "h1", [0, 2], lease_s=30)
        attempts.assign(s, b, 0, "h2", [3], lease_s=30)
    with db.read() as s:
        snap = snapshot.read(s, host_stale_s=30, half_life_h=168.0)
    assert {h: sorted(c) for h, c in snap.used.items()} == {"h1": [0, 2], "h2": [3]}
    assert {name for name, *_ in snap.hosts} == {"h1", "h2", "h3"}


def test_a_job_that_succeeded_before_its_stop_reached_it_is_not_run_again(db):
    """Preemption asked for, but the job exited 0 before the signal came: its work is
    done. One that exits 0 after the signal (it saved, and has work left) is requeued."""
    done, saved = new_job(db), new_job(db)
    with db.write() as s:
        for job_id in (done, saved):
            n = attempts.assign(s, job_id, 0, "h1", [], lease_s=30)
            assert attempts.start(s, job_id, n, "h1", boot_id="b", log_path="/l", lease_s=30)
            jobs.request_stop(s, job_id, "admin", StopRequest.PREEMPT)
    with db.write() as s:
        assert attempts.finish(s, done, 1, "h1", Ending(Outcome.SUCCEEDED, "exit 0", 0,
                                                        untouched=True),
                               retry_backoff_s=0) is JobState.SUCCEEDED
        assert attempts.finish(s, saved, 1, "h1", Ending(Outcome.SUCCEEDED, "exit 0", 0),
                               retry_backoff_s=0) is JobState.QUEUED
    with db.read() as s:
        assert s.get(Job, done).reason == \
            "exit 0: finished before its preemption reached it"


def test_an_agent_starting_requeues_what_came_before_its_registration_not_what_came_since(db):
    """A restarting agent registers its host, then recovers: the leader may assign the
    host new work in between, which is not a leftover of the agent before (it was taken
    for one, and requeued, so a job waiting for that host ran twice)."""
    from tpuq.state import queries

    old, new = new_job(db), new_job(db)
    with db.write() as s:
        assert attempts.assign(s, old, 0, "h1", [], lease_s=30)
        before = s.scalar(select(Attempt.assigned_at).where(Attempt.job_id == old))
    while True:  # the database clock moves past the first assignment
        with db.read() as s:
            registered_at = queries.now(s)
        if registered_at > before:
            break
    with db.write() as s:
        assert attempts.assign(s, new, 0, "h1", [], lease_s=30)
    with db.read() as s:
        assert [j.id for j, _ in attempts.active_on_host(s, "h1", registered_at)] == [old]
    with db.write() as s:
        assert attempts.requeue_rebooted(s, "h1", "boot-2", assigned_before=registered_at,
                                         retry_backoff_s=0) == [old]
    with db.read() as s:
        assert (s.get(Job, old).state, s.get(Job, new).state) == ("queued", "assigned")
