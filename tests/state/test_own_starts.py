"""The leader's own starts (scheduler.passes.OwnStarts): an attempt a pass gives the
leader's own host goes `assigned -> running` in the pass's transaction, one commit for
both; the process is spawned only once that commit landed, and nothing is left reserved
when it did not."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from tests.state.rows import register_host
from tpuq.scheduler.passes import Scheduler
from tpuq.settings import Settings
from tpuq.spec import JobSpec
from tpuq.state import attempts, jobs
from tpuq.state.models import Job, JobEvent

HOST = "h"


class Own:
    """An executor's three calls as the agent's make them (the real start statement),
    noting what each saw."""

    def __init__(self, db: Any, refuse: set[int] = frozenset(), fail_on: int | None = None,
                 spawn_fails: int | None = None) -> None:
        self.db, self.refuse, self.fail_on = db, refuse, fail_on
        self.spawn_fails = spawn_fails
        self.begun: list[tuple[int, str]] = []  # (job, its state in the pass's transaction)
        self.finished: list[tuple[int, str]] = []  # (job, its state committed, read apart)
        self.abandoned: list[int] = []

    def begin_start(self, s: Any, job_id: int, attempt: int) -> Any:
        if job_id == self.fail_on:
            raise RuntimeError("the pass breaks after a start was begun")
        if job_id in self.refuse:
            return None
        state_then = s.execute(select(Job.state).where(Job.id == job_id)).scalar_one()
        row = attempts.start(s, job_id, attempt, HOST, boot_id="b", log_path="/l",
                             lease_s=60.0)
        assert row is not None
        self.begun.append((job_id, state_then))
        return job_id

    def finish_start(self, token: Any) -> None:
        with self.db.read() as s:  # another transaction: sees only what committed
            state = s.execute(select(Job.state).where(Job.id == token)).scalar_one()
        self.finished.append((token, state))
        if token == self.spawn_fails:
            raise OSError("the keeper server is gone")

    def abandon_start(self, token: Any) -> None:
        self.abandoned.append(token)


def _jobs(db: Any, n: int) -> list[int]:
    with db.write() as s:
        register_host(s, HOST)
        return [jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t",
                                       chips=1)) for _ in range(n)]


def _pass(db: Any, own: Own, told: list[int]) -> Scheduler:
    sched = Scheduler(db, Settings(home="/tmp", host=HOST), HOST, own=own,
                      dispatch=lambda host, job_id, n: told.append(job_id))
    sched.keep_lease()
    return sched


def test_the_leaders_own_start_commits_with_its_assignment(db) -> None:  # type: ignore[no-untyped-def]
    first, second = _jobs(db, 2)
    own, told = Own(db), []
    assert _pass(db, own, told).run_pass() == 2
    assert own.begun == [(first, "assigned"), (second, "assigned")]
    assert own.finished == [(first, "running"), (second, "running")], \
        "spawned only after the one commit, which holds both changes"
    assert told == [] and own.abandoned == []
    with db.read() as s:
        events = s.execute(select(JobEvent.job_id, JobEvent.to_state)
                           .where(JobEvent.job_id == first).order_by(JobEvent.id)).all()
    assert [e.to_state for e in events] == ["queued", "assigned", "running"]


def test_a_start_this_host_does_not_take_now_is_dispatched_as_before(db) -> None:  # type: ignore[no-untyped-def]
    first, second = _jobs(db, 2)
    own, told = Own(db, refuse={second}), []
    assert _pass(db, own, told).run_pass() == 2
    assert [j for j, _ in own.finished] == [first] and told == [second]
    with db.read() as s:
        assert s.execute(select(Job.state).where(Job.id == second)).scalar_one() == "assigned"


def test_a_pass_that_does_not_commit_leaves_nothing_started_or_reserved(db) -> None:  # type: ignore[no-untyped-def]
    first, second = _jobs(db, 2)
    own, told = Own(db, fail_on=second), []
    with pytest.raises(RuntimeError):
        _pass(db, own, told).run_pass()
    assert own.abandoned == [first], "the start begun before the failure is let go"
    assert own.finished == [] and told == []
    with db.read() as s:
        states = dict(s.execute(select(Job.id, Job.state).where(Job.id.in_([first, second]))).all())
    assert states == {first: "queued", second: "queued"}, "the whole pass rolled back"


def test_a_start_that_fails_to_spawn_leaves_the_others_started(db) -> None:  # type: ignore[no-untyped-def]
    """Each committed start is spawned (and so let go) whatever another one raises; the
    pass then raises the first error, as a failed dispatch did."""
    first, second = _jobs(db, 2)
    own, told = Own(db, spawn_fails=first), []
    with pytest.raises(OSError):
        _pass(db, own, told).run_pass()
    assert [j for j, _ in own.finished] == [first, second]
