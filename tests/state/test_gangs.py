"""A slice job's worker rows tell how each worker ended, also one nobody reports on."""

from __future__ import annotations

from sqlalchemy import update

from tpuq.spec import JobSpec
from tpuq.state import attempts, gangs, jobs
from tpuq.state.attempts import Ending
from tpuq.state.models import GangWorker
from tpuq.state.states import Outcome


def running_gang(s, workers: int = 2) -> int:  # type: ignore[no-untyped-def]
    spec = JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t", chips=None,
                   tpu_type="v4-32").validate()
    job = jobs.submit(s, spec)
    hosts = [(f"w{i}", (0, 1, 2, 3)) for i in range(workers)]
    assert gangs.assign(s, job, 0, "pod", hosts, lease_s=30) == 1
    for w in range(workers):
        assert gangs.ready(s, job, 1, w)
    assert attempts.start(s, job, 1, "pod", boot_id="b", log_path="/l", lease_s=30)
    for w in range(workers):
        assert gangs.running(s, job, 1, w, pid=100 + w, proc_start=1, log_path="/l",
                             lease_s=30)
    return job


def expire(s, job: int, worker: int) -> None:  # type: ignore[no-untyped-def]
    s.execute(update(GangWorker).where(GangWorker.job_id == job, GangWorker.worker == worker)
              .values(lease_expires_at=0.0))


def rows(s, job: int) -> dict[int, GangWorker]:  # type: ignore[no-untyped-def]
    return {g.worker: g for g in s.query(GangWorker).filter_by(job_id=job)
            .populate_existing()}


def test_a_lost_workers_row_ends_with_its_attempt(db):
    with db.write() as s:
        job = running_gang(s)
        expire(s, job, 1)
    with db.write() as s:
        ms = gangs.members(s, job, 1, margin_s=1.0, lease_s=30)
        assert [m.lease_lost for m in ms] == [False, True]
        assert gangs.close_lost(s, job, 1, margin_s=1.0) == ["w1"]
    with db.read() as s:
        lost = rows(s, job)[1]
        assert (lost.state, lost.outcome, lost.ended_at is not None) == ("ended", "lost", True)
        assert lost.reason == "worker 1 (w1) lost: its agent stopped answering"
        assert rows(s, job)[0].state == "running", "a live worker reports its own end"


def test_the_reaper_ends_the_rows_of_an_attempt_nobody_reports_on(db):
    """Worker 0's host died and the reaper requeued the job; worker 1's agent died too.
    Nobody will record their ends: the sweep does, once their leases ran out."""
    with db.write() as s:
        job = running_gang(s)
        assert attempts.finish(s, job, 1, "pod", Ending(Outcome.LOST, "lease expired"),
                               retry_backoff_s=0)
        expire(s, job, 0)
    with db.read() as s:
        stale = gangs.stale(s, margin_s=1.0)
        assert [(r.job_id, r.worker) for r in stale] == [(job, 0)], "w1 still holds a lease"
    with db.write() as s:
        assert gangs.sweep(s, stale) == ["w0"]
        expire(s, job, 1)
    with db.write() as s:
        assert gangs.sweep(s, gangs.stale(s, margin_s=1.0)) == ["w1"]
    with db.read() as s:
        assert {g.worker: (g.state, g.outcome) for g in rows(s, job).values()} == \
            {0: ("ended", "lost"), 1: ("ended", "lost")}
        assert gangs.stale(s, margin_s=1.0) == []


def test_a_worker_stopped_by_tpuq_says_why_and_its_own_end_stays_its_own(db):
    with db.write() as s:
        job = running_gang(s)
        assert gangs.stop_gang(s, job, 1, "worker 1 (w1) ended (exit 3): stopping the gang")
        own = gangs.ended(s, job, 1, 1, Ending(Outcome.FAILED, "exited 3", 3, untouched=True))
        killed = gangs.ended(s, job, 1, 0, Ending(Outcome.FAILED, "killed by signal 9",
                                                  None, 9))
    assert own is not None and own.outcome is Outcome.FAILED
    assert killed is not None and killed.outcome is Outcome.PREEMPTED
    assert killed.reason.startswith("stopped with the gang (worker 1 (w1) ended (exit 3)")
    with db.read() as s:
        assert {g.worker: g.outcome for g in rows(s, job).values()} == \
            {0: "preempted", 1: "failed"}
