"""What a scheduling pass does with dependencies, read in one statement (deps.read_open):
a queued job waits for an unmet one, a waiting job (queued or held) whose "ok"
dependency ended otherwise is cancelled, naming it, and never planned."""

from __future__ import annotations

from sqlalchemy import update

from tests.state.rows import register_host
from tpuq.scheduler.passes import Scheduler
from tpuq.settings import Settings
from tpuq.spec import JobSpec
from tpuq.state import deps, jobs
from tpuq.state.clock import db_now
from tpuq.state.models import Job, JobEvent
from tpuq.state.states import JobState


def _job(s, held: bool = False) -> int:  # type: ignore[no-untyped-def]
    return jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t", chips=1),
                       held=held)


def _end(s, job_id: int, state: JobState) -> None:  # type: ignore[no-untyped-def]
    """A job that ran and ended so (its attempts do not matter here)."""
    s.execute(update(Job).where(Job.id == job_id).values(state=state.value,
                                                         ended_at=db_now()))


def _scheduler(db, started: list[int]) -> Scheduler:  # type: ignore[no-untyped-def]
    sched = Scheduler(db, Settings(home="/tmp", host="h"), "agent-1",
                      dispatch=lambda host, job_id, n: started.append(job_id))
    sched.keep_lease()
    return sched


def test_a_pass_cancels_doomed_waiters_and_plans_the_rest(db) -> None:  # type: ignore[no-untyped-def]
    with db.write() as s:
        register_host(s, "h")
        failed, ok, pending = _job(s), _job(s), _job(s)
        _end(s, failed, JobState.FAILED)
        _end(s, ok, JobState.SUCCEEDED)
        doomed = _job(s)  # waits for a succeeded job and two that did not succeed
        deps.add(s, [doomed], after=[ok, pending, failed], after_any=[])
        doomed_held = _job(s, held=True)
        deps.add(s, [doomed_held], after=[failed], after_any=[])
        either = _job(s)  # "any": a failed dependency has ended, which is all it asks
        deps.add(s, [either], after=[], after_any=[failed])
        waiting = _job(s)
        deps.add(s, [waiting], after=[pending], after_any=[ok])
    with db.read() as s:
        links = deps.read_open(s)
    assert links.doomed == {doomed: (failed, "failed"), doomed_held: (failed, "failed")}
    assert links.unmet == {doomed: (failed, pending), waiting: (pending,)}, \
        "held jobs and met links are not waited for"
    started: list[int] = []
    _scheduler(db, started).run_pass()
    assert pending in started and either in started
    assert doomed not in started and waiting not in started
    with db.read() as s:
        states = dict(s.query(Job.id, Job.state))
        reasons = dict(s.query(JobEvent.job_id, JobEvent.reason)
                       .filter(JobEvent.to_state == "cancelled"))
    assert states[doomed] == states[doomed_held] == "cancelled"
    assert states[waiting] == "queued"
    assert reasons == {doomed: f"dependency job {failed} failed",
                       doomed_held: f"dependency job {failed} failed"}


def test_a_held_waiter_is_cancelled_with_nothing_queued(db) -> None:  # type: ignore[no-untyped-def]
    with db.write() as s:
        failed = _job(s)
        _end(s, failed, JobState.CANCELLED)
        held = _job(s, held=True)
        deps.add(s, [held], after=[failed], after_any=[])
    _scheduler(db, []).run_pass()
    with db.read() as s:
        assert s.get(Job, held).state == "cancelled"
