"""The end of a successful attempt in one statement (outcome.record's first try,
attempts.finish_running_success): it writes exactly what the transaction that reads the
job first writes, on PostgreSQL in one round trip; and where something else could
decide the job's fate (a stop request, which moves the job out of running; an attempt
fenced out; a failure) it writes nothing and the full path decides."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, select

from tests.state.rows import register_host
from tpuq.agent.attempts import outcome
from tpuq.agent.attempts.outcome import Progress
from tpuq.spec import JobSpec
from tpuq.state import attempts, jobs
from tpuq.state.attempts import Ending
from tpuq.state.models import Allocation, Attempt, Host, Job, JobEvent, Notification
from tpuq.state.states import Outcome, StopRequest

HOST = "h"
DONE = Ending(Outcome.SUCCEEDED, "exit 0", exit_code=0, untouched=True)


def _running(db: Any, *, notify: str | None = None) -> int:
    """A job whose first attempt runs on HOST on a chip of its own, as an agent leaves it."""
    with db.write() as s:
        if s.execute(select(Host.name).where(Host.name == HOST)).first() is None:
            register_host(s, HOST)
        job_id = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t",
                                        chips=1, notify=notify,
                                        notify_to="json://localhost/x" if notify else None))
    with db.write() as s:
        chip = min(set(range(4)) - set(s.execute(select(Allocation.chip)).scalars()))
        assert attempts.assign(s, job_id, 0, HOST, [chip], lease_s=60.0) == 1
        assert attempts.start(s, job_id, 1, HOST, boot_id="b", log_path="/l",
                              lease_s=60.0) is not None
    return job_id


def _written(db: Any, job_id: int) -> dict[str, Any]:
    """What the end left, without the ids and clock readings that differ by job."""
    with db.read() as s:
        job = s.execute(select(Job).where(Job.id == job_id)).scalar_one()
        att = s.execute(select(Attempt).where(Attempt.job_id == job_id)).scalar_one()
        events = [(e.from_state, e.to_state, e.reason, e.actor, e.attempt) for e in
                  s.execute(select(JobEvent).where(JobEvent.job_id == job_id,
                                                   JobEvent.from_state == "running")
                            .order_by(JobEvent.id)).scalars()]  # the end's
        chips = list(s.execute(select(Allocation.chip).where(Allocation.job_id == job_id))
                     .scalars())
        told = [n.event for n in s.execute(select(Notification)
                                           .where(Notification.job_id == job_id)).scalars()]
    return {"state": job.state, "reason": job.reason, "exit": (job.exit_code, job.exit_signal),
            "lease": job.lease_expires_at, "stop": job.stop_request,
            "ended": job.ended_at is not None,
            "attempt": (att.outcome, att.exit_code, att.reason, att.pid, att.proc_start,
                        att.checkpoint_step, att.checkpoint_at, att.checkpoint_total,
                        att.eta_at, att.ended_at is not None),
            "events": events, "chips": chips, "told": told}


@pytest.mark.parametrize("progress", [None, Progress(40, 1.5e9, 100, 1.6e9)])
def test_one_statement_writes_what_the_transaction_writes(db, progress) -> None:  # type: ignore[no-untyped-def]
    fast, full = _running(db, notify="end"), _running(db, notify="end")
    with db.single() as s:
        assert attempts.finish_running_success(s, fast, 1, HOST, DONE, process=(42, 7),
                                               progress=progress)
    with db.write() as s:
        if progress is not None:
            attempts.record_progress(s, full, 1, *progress)
        attempts.finish_recorded(s, full, 1, HOST, DONE, retry_backoff_s=1.0,
                                 process=(42, 7))
    got = _written(db, fast)
    assert got == _written(db, full)
    assert got["state"] == "succeeded" and got["chips"] == [] and got["told"] == ["succeeded"]


def test_on_postgresql_it_is_one_statement_and_no_transaction(db) -> None:  # type: ignore[no-untyped-def]
    if db.is_sqlite:
        pytest.skip("SQLite runs a transition as several statements in one transaction")
    job_id = _running(db)
    said: list[tuple[str, bool]] = []  # each statement, and whether it ran in autocommit
    event.listen(db.engine, "before_cursor_execute", lambda conn, cursor, sql, *rest: said.append(
        (sql, conn.connection.driver_connection.autocommit)))
    assert outcome.record(db, job_id, 1, HOST, DONE, progress=None, retry_backoff_s=1.0) \
        == DONE
    assert [auto for _, auto in said] == [True], said
    assert _written(db, job_id)["state"] == "succeeded"


@pytest.mark.parametrize("stop", [StopRequest.CANCEL, StopRequest.PREEMPT])
def test_a_job_asked_to_stop_is_decided_by_the_full_path(db, stop) -> None:  # type: ignore[no-untyped-def]
    job_id = _running(db)
    with db.write() as s:
        assert jobs.request_stop(s, job_id, "u", stop).ok
    before = _written(db, job_id)
    with db.single() as s:
        assert not attempts.finish_running_success(s, job_id, 1, HOST, DONE)
    assert _written(db, job_id) == before, "nothing written"
    done = outcome.record(db, job_id, 1, HOST, DONE, progress=None, retry_backoff_s=1.0)
    assert done is not None and "finished before its" in done.reason, \
        "a success the stop never reached, told as such"


def test_an_attempt_not_this_hosts_is_not_ended(db) -> None:  # type: ignore[no-untyped-def]
    job_id = _running(db)
    before = _written(db, job_id)
    with db.single() as s:
        assert not attempts.finish_running_success(s, job_id, 1, "elsewhere", DONE)
        assert not attempts.finish_running_success(s, job_id, 2, HOST, DONE)
    assert _written(db, job_id) == before
    assert outcome.record(db, job_id, 2, HOST, DONE, progress=None,
                          retry_backoff_s=1.0) is None


def test_only_a_success_takes_the_short_way(db) -> None:  # type: ignore[no-untyped-def]
    job_id = _running(db)
    with db.single() as s, pytest.raises(ValueError, match="not a success"):
        attempts.finish_running_success(s, job_id, 1, HOST, Ending(Outcome.FAILED, "exit 1", 1))
