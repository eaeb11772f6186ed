"""The life of an attempt: assign, start, renew, finish, and recovery of lost ones.

The attempt number is the fencing token: every write below names (job, attempt, host),
so a stale doorbell, a duplicate delivery or a host that lost its lease changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    delete,
    insert,
    literal,
    literal_column,
    select,
    union_all,
    update,
)
from sqlalchemy.orm import Session

from tpuq.checkpoints import Placement
from tpuq.state import direct, hosts
from tpuq.state.clock import db_now, from_now
from tpuq.state.db import SCHEMA_HEAD
from tpuq.state.models import Allocation, Attempt, Job
from tpuq.state.states import (
    ACTIVE,
    ASSIGNED,
    EVENT_RESTARTED,
    NOT_CHARGED,
    PREEMPTING,
    QUEUED,
    RUNNING,
    JobState,
    Outcome,
    StopRequest,
)
from tpuq.state.transitions import JOBS, Rider, notification_rider, transition_returning

AGENT = "agent"
ATTEMPTS = cast(Table, Attempt.__table__)
ALLOCATIONS = cast(Table, Allocation.__table__)


def assign(s: Session, job_id: int, attempt_now: int, host: str, chips: Sequence[int],
           lease_s: float, reason: str | None = None, *, book: bool = True,
           checkpoint: Placement | None = None) -> int | None:
    """queued -> assigned with attempt+1, chip rows and a lease, in the caller's transaction.

    Returns the new attempt number, or None when the job changed meanwhile. A chip that is
    already booked makes the INSERT fail (primary key): the caller's transaction rolls back.
    book=False records the attempt's chips without booking them on `host` (a slice job
    books each worker's own, gangs.assign). `checkpoint`: where the attempt keeps its
    checkpoints (tpuq/checkpoints.py), recorded on the job; when it starts over (they
    are on a host it cannot reach), the event, the attempt and a notification say so.
    """
    new = attempt_now + 1
    over = checkpoint.started_over if checkpoint else None
    riders = [_new_attempt(job_id, new, host, chips, over)]
    if chips and book:
        riders.append(_book_chips(job_id, new, host, chips))
    values: dict[str, Any] = {"attempt": new, "host": host, "stop_request": None,
                              "lease_expires_at": from_now(lease_s)}
    if checkpoint is not None:
        values.update(checkpoint_dir=checkpoint.dir, checkpoint_host=checkpoint.host)
        if checkpoint.fresh:
            values["checkpoint_seen_at"] = None
    if over is not None:
        riders.append(notification_rider(EVENT_RESTARTED, over))
    said = reason or f"assigned to {host} chips {','.join(map(str, chips))}"
    row = transition_returning(
        s, job_id, QUEUED, ASSIGNED, attempt=attempt_now, actor="scheduler",
        reason=f"{said}; {over}" if over else said, values=values, riders=riders)
    return None if row is None else new


# what the host needs of the job to run it, returned by the start statement itself
RUN_FIELDS = ("command", "cwd", "env", "stop_signal", "grace_s", "time_limit_s", "tcmalloc",
              "owner", "checkpoint_dir", "output", "name", "array_id", "array_index", "session")


def _of_this_attempt(column: Any) -> Any:
    # the outer row named in plain SQL: SQLite renders RETURNING columns unqualified, and
    # an unqualified `id` inside this subquery would be the attempt's own id
    return select(column).where(ATTEMPTS.c.job_id == literal_column("jobs.id"),
                                ATTEMPTS.c.number == literal_column("jobs.attempt")) \
        .scalar_subquery().label(column.name)


START_COLUMNS = (*(JOBS.c[name] for name in RUN_FIELDS), _of_this_attempt(ATTEMPTS.c.chips),
                 _of_this_attempt(ATTEMPTS.c.started_over))


def start(s: Session, job_id: int, attempt: int, host: str, *, boot_id: str, log_path: str,
          lease_s: float) -> Any:
    """assigned -> running, before the process exists; returns what the host needs to run
    it (START_COLUMNS, a named tuple). One statement on PostgreSQL: may run under
    Database.single().

    None means a stale or duplicate doorbell, or a cancel that came first: do nothing.
    Recording the boot id here (not after the spawn) lets a restarted agent recognise
    an attempt of its own boot even if it died between this commit and the spawn.
    """
    return transition_returning(
        s, job_id, ASSIGNED, RUNNING, attempt=attempt, host=host, actor=AGENT, reason=f"starting on {host}",
        values={"lease_expires_at": from_now(lease_s)}, returning=START_COLUMNS,
        riders=[_attempt_update(job_id, attempt, "started", {
            "boot_id": boot_id, "log_path": log_path, "code_revision": SCHEMA_HEAD})])


# ---- riders: the attempt and chip rows written with a transition (transitions.Rider) ----
def _gated(stmt: Any, gate: ColumnElement[bool] | None) -> Any:
    return stmt if gate is None else stmt.where(gate)


def _new_attempt(job_id: int, number: int, host: str, chips: Sequence[int],
                 started_over: str | None = None) -> Rider:
    cols: dict[str, Any] = {
        "job_id": bindparam("tq_a_job", type_=Integer),
        "number": bindparam("tq_a_number", type_=Integer),
        "host": bindparam("tq_a_host", type_=String),
        "chips": bindparam("tq_a_chips", type_=ATTEMPTS.c.chips.type),
        "assigned_at": db_now(),
        # the code that assigns (and later starts) it: the database refuses older code's
        "code_revision": literal(SCHEMA_HEAD, String),
        "started_over": bindparam("tq_a_over", type_=Text)}

    def build(gate: ColumnElement[bool] | None) -> Any:
        if gate is None:
            return insert(ATTEMPTS).values(**cols)
        return insert(ATTEMPTS).from_select(list(cols), select(*cols.values()).where(gate))

    return Rider("new attempt", build, {"tq_a_job": job_id, "tq_a_number": number,
                                        "tq_a_host": host, "tq_a_chips": list(chips),
                                        "tq_a_over": started_over})


def _book_chips(job_id: int, attempt: int, host: str, chips: Sequence[int]) -> Rider:
    """One allocation row per chip: the primary key refuses a chip booked twice."""
    n = len(chips)

    def row(i: int) -> dict[str, Any]:
        return {"host": bindparam("tq_c_host", type_=String),
                "chip": bindparam(f"tq_c_chip{i}", type_=Integer),
                "job_id": bindparam("tq_c_job", type_=Integer),
                "attempt": bindparam("tq_c_attempt", type_=Integer)}

    def build(gate: ColumnElement[bool] | None) -> Any:
        if gate is None:
            return insert(ALLOCATIONS).values([row(i) for i in range(n)])
        rows = [select(*row(i).values()).where(gate) for i in range(n)]
        return insert(ALLOCATIONS).from_select(list(row(0)),
                                               rows[0] if n == 1 else union_all(*rows))

    params: dict[str, Any] = {"tq_c_host": host, "tq_c_job": job_id, "tq_c_attempt": attempt}
    params.update({f"tq_c_chip{i}": c for i, c in enumerate(chips)})
    return Rider(("book chips", n), build, params)


_ATTEMPT_TIMES = {"started": "started_at", "ended": "ended_at"}


def _attempt_update(job_id: int, number: int, when: str, values: dict[str, Any]) -> Rider:
    """Values of the attempt row, with `<when>_at` set to the database clock."""
    names = tuple(sorted(values))

    def build(gate: ColumnElement[bool] | None) -> Any:
        changes: dict[str, Any] = {c: bindparam(f"tq_u_{c}", type_=ATTEMPTS.c[c].type)
                                   for c in names}
        changes[_ATTEMPT_TIMES[when]] = db_now()
        return _gated(update(ATTEMPTS).where(ATTEMPTS.c.job_id == bindparam("tq_u_job"),
                                             ATTEMPTS.c.number == bindparam("tq_u_number"))
                      .values(**changes), gate)

    params = {f"tq_u_{c}": v for c, v in values.items()}
    params.update(tq_u_job=job_id, tq_u_number=number)
    return Rider(("attempt", when, names), build, params)


def record_process(s: Session, job_id: int, attempt: int, pid: int, proc_start: int | None) -> None:
    """The spawned process, with its start time so a recycled pid is never mistaken for it.
    One statement: may run under Database.single()."""
    _attempt_row(s, job_id, attempt, pid=pid, proc_start=proc_start)


def _attempt_row(s: Session, job_id: int, number: int, **values: object) -> None:
    s.execute(update(ATTEMPTS).where(ATTEMPTS.c.job_id == job_id, ATTEMPTS.c.number == number)
              .values(**values))


@dataclass(frozen=True)
class Lease:
    held: bool
    stop_request: str | None = None


def renew(s: Session, job_id: int, attempt: int, host: str, lease_s: float) -> Lease:
    """Extend the lease; held=False means this attempt was fenced out: kill it now."""
    row = s.execute(
        update(JOBS)
        .where(JOBS.c.id == job_id, JOBS.c.attempt == attempt, JOBS.c.host == host,
               JOBS.c.state.in_([ASSIGNED.value, RUNNING.value, PREEMPTING.value]))
        .values(lease_expires_at=db_now() + lease_s)
        .returning(JOBS.c.stop_request)
    ).first()
    return Lease(False) if row is None else Lease(True, row.stop_request)


def checkpoint_seen(s: Session, job_id: int, attempt: int) -> None:
    """The attempt's host-local checkpoint directory holds something (its agent saw it):
    from now on the job waits for that host when it is requeued (scheduler/policy.py)."""
    s.execute(update(JOBS).where(JOBS.c.id == job_id, JOBS.c.attempt == attempt,
                                 JOBS.c.checkpoint_seen_at.is_(None))
              .values(checkpoint_seen_at=db_now()))


def record_progress(s: Session, job_id: int, attempt: int, step: int, at: float,
                    total: int | None = None, eta_at: float | None = None) -> None:
    _attempt_row(s, job_id, attempt, checkpoint_step=step, checkpoint_at=at,
                 checkpoint_total=total, eta_at=eta_at)


def release_chips(s: Session, job_id: int, attempt: int) -> None:
    s.execute(_release_chips(job_id, attempt).build(None), {"tq_r_job": job_id,
                                                            "tq_r_attempt": attempt})


def _release_chips(job_id: int, attempt: int) -> Rider:
    def build(gate: ColumnElement[bool] | None) -> Any:
        return _gated(delete(ALLOCATIONS).where(
            ALLOCATIONS.c.job_id == bindparam("tq_r_job"),
            ALLOCATIONS.c.attempt == bindparam("tq_r_attempt")), gate)

    return Rider("release chips", build, {"tq_r_job": job_id, "tq_r_attempt": attempt})


@dataclass(frozen=True)
class Ending:
    outcome: Outcome
    reason: str
    exit_code: int | None = None
    exit_signal: int | None = None
    # it ended by itself before any stop signal reached it (see effective_ending)
    untouched: bool = False


# what finish() needs of the job: a plain row, not an ORM object (it runs once per job)
_FINISH_COLUMNS = tuple(JOBS.c[name] for name in (
    "state", "attempt", "host", "stop_request", "reason", "failures", "max_retries",
    "preemptions", "requeue_on_preempt", "session"))
# locked: a stop request written meanwhile must not be missed (it decides the outcome)
_FINISH_ROW = select(*_FINISH_COLUMNS).where(JOBS.c.id == bindparam("tq_job")).with_for_update()


# Outcomes that are the host's doing, not the job's. They requeue the job uncharged, but
# never without end: after `host_retries` of them in a row the next one fails the job
# (its owner is told, the reason says why), so no job loops silently on a broken host.
HOST_REASONS: frozenset[Outcome] = frozenset({Outcome.HOST_ERROR, Outcome.LOST})
HOST_RETRIES = 3  # Settings.host_error_retries


def host_streak(s: Session, job_id: int, before: int, limit: int) -> int:
    """How many attempts right before attempt `before` ended for host reasons (at most
    `limit`: only whether the cap is reached matters)."""
    if limit <= 0:
        return 0
    outcomes = s.scalars(select(ATTEMPTS.c.outcome)
                         .where(ATTEMPTS.c.job_id == job_id, ATTEMPTS.c.number < before)
                         .order_by(ATTEMPTS.c.number.desc()).limit(limit)).all()
    streak = 0
    for o in outcomes:
        if o not in {h.value for h in HOST_REASONS}:
            break
        streak += 1
    return streak


def finish(s: Session, job_id: int, attempt: int, host: str | None, end: Ending, *,
           retry_backoff_s: float, actor: str = AGENT,
           host_retries: int = HOST_RETRIES) -> JobState | None:
    """End an attempt and move the job where the outcome says; None if fenced out.
    `retry_backoff_s` (Settings.retry_backoff_s) delays a retry after a failure or a
    host error, doubling with each failure; `host_retries` (Settings.host_error_retries)
    host problems in a row requeue the job, the next one fails it."""
    done = finish_recorded(s, job_id, attempt, host, end, retry_backoff_s=retry_backoff_s,
                           actor=actor, host_retries=host_retries)
    return None if done is None else done[0]


def finish_recorded(s: Session, job_id: int, attempt: int, host: str | None, end: Ending, *,
                    retry_backoff_s: float, actor: str = AGENT,
                    host_retries: int = HOST_RETRIES,
                    process: tuple[int, int | None] | None = None,
                    ) -> tuple[JobState, Ending] | None:
    """As finish(), with the ending as recorded (a stop someone asked for decides how
    the attempt counts: effective_ending), so whoever reports it says what show says.
    `process`: (pid, start ticks) of a process that ended before it was recorded,
    written in the attempt's own update (record_process)."""
    job = direct.first(s, _FINISH_ROW, {"tq_job": job_id})
    if job is None or job.attempt != attempt or JobState(job.state) not in ACTIVE:
        return None
    if host is not None and job.host != host:
        return None
    end = effective_ending(job.stop_request, end,
                           job.reason if job.state == JobState.PREEMPTING.value else None)
    to, values, reason = _next_state(job, end, retry_backoff_s)
    if to is QUEUED and end.outcome in HOST_REASONS and JobState(job.state) is not ASSIGNED \
            and host_streak(s, job_id, attempt, host_retries) >= host_retries:
        # the state machine has no assigned -> failed: an attempt that never started is
        # requeued, and the streak it adds ends the job at its next host problem
        to = JobState.FAILED
        values.update(failures=job.failures + 1, ended_at=from_now(), not_before=None)
        reason = (f"{end.reason}; failed: {host_retries + 1} host problems in a row "
                  f"(TPUQ_HOST_ERROR_RETRIES={host_retries}), so not requeued again")
    row = transition_returning(
        s, job_id, JobState(job.state), to, attempt=attempt, host=host, reason=reason,
        actor=actor, values=values, riders=_end_riders(job_id, attempt, end, process))
    return None if row is None else (to, end)


def finish_running_success(s: Session, job_id: int, attempt: int, host: str, end: Ending, *,
                           process: tuple[int, int | None] | None = None,
                           progress: Sequence[Any] | None = None) -> bool:
    """finish_recorded's one statement for the commonest end: a running attempt that
    succeeded, with its last reported `progress` (step, at, total, eta_at). A running job
    has no stop request (every stop moves it to preempting, and only an assignment, which
    clears it, leads back to running), so nothing but the end decides where it goes: no
    read of the row first. On PostgreSQL one round trip under Database.single(). False,
    with nothing written, when the job is not running this attempt here: then
    finish_recorded reads it and decides."""
    if end.outcome is not Outcome.SUCCEEDED:
        raise ValueError(f"not a success: {end.outcome.value}")
    to, values, reason = _next_state(None, end, 0.0)
    extra = {} if progress is None else dict(zip(
        ("checkpoint_step", "checkpoint_at", "checkpoint_total", "eta_at"), progress,
        strict=True))
    return transition_returning(
        s, job_id, RUNNING, to, attempt=attempt, host=host, reason=reason, actor=AGENT,
        values=values, riders=_end_riders(job_id, attempt, end, process, extra)) is not None


def _end_riders(job_id: int, attempt: int, end: Ending,
                process: tuple[int, int | None] | None,
                extra: dict[str, Any] | None = None) -> list[Rider]:
    """What an attempt's end writes with its job's change: the attempt row's end (and
    its process, if not yet written; `extra` columns of it) and its chips freed."""
    return [_attempt_update(job_id, attempt, "ended", {
                "outcome": end.outcome.value, "exit_code": end.exit_code,
                "exit_signal": end.exit_signal, "reason": end.reason,
                **({} if process is None else {"pid": process[0], "proc_start": process[1]}),
                **(extra or {})}),
            _release_chips(job_id, attempt)]


# A stop someone asked for decides how the attempt counts, whatever the exit code was:
# a job that saves and exits 0 after its preemption notice still has work left to do.
# Except a job that succeeded before the stop signal reached it: its work is done, and
# running it again would do it twice.
STOP_OUTCOME: dict[str, Outcome] = {StopRequest.CANCEL: Outcome.CANCELLED,
                                     StopRequest.PREEMPT: Outcome.PREEMPTED,
                                     StopRequest.TIMEOUT: Outcome.TIMEOUT}
STOP_WORDS: dict[str, str] = {StopRequest.CANCEL: "cancelled", StopRequest.PREEMPT: "preempted",
                               StopRequest.TIMEOUT: "time limit reached"}
STOP_NOUNS: dict[str, str] = {StopRequest.CANCEL: "cancel", StopRequest.PREEMPT: "preemption",
                               StopRequest.TIMEOUT: "time limit"}


def effective_ending(stop_request: str | None, end: Ending, why: str | None = None) -> Ending:
    """`why`: the reason recorded with the stop request (e.g. the host's notice)."""
    if stop_request not in STOP_OUTCOME:
        return end
    if end.untouched and end.outcome is Outcome.SUCCEEDED:
        return Ending(end.outcome, f"{end.reason}: finished before its "
                      f"{STOP_NOUNS[stop_request]} reached it", end.exit_code, end.exit_signal,
                      untouched=True)
    return Ending(STOP_OUTCOME[stop_request],
                  f"{STOP_WORDS[stop_request]} ({why or 'requested'}); {end.reason}",
                  end.exit_code, end.exit_signal)


def _next_state(job: Any, end: Ending, backoff_s: float) -> tuple[JobState, dict[str, Any], str]:
    values: dict[str, object] = {"exit_code": end.exit_code, "exit_signal": end.exit_signal,
                                 "lease_expires_at": None, "stop_request": None}
    o = end.outcome
    if o is Outcome.FAILED:
        if job.failures < job.max_retries:
            delay = backoff_s * (2 ** job.failures)
            values.update(failures=job.failures + 1, not_before=from_now(delay))
            return QUEUED, values, (f"{end.reason}; retry {job.failures + 1}/{job.max_retries} "
                               f"in {delay:g}s")
        values.update(failures=job.failures + 1, ended_at=from_now())
        return JobState.FAILED, values, end.reason
    if o in NOT_CHARGED:
        if o is Outcome.PREEMPTED:
            values["preemptions"] = job.preemptions + 1
        if job.session:  # a person was attached to it: they start another themselves
            values["ended_at"] = from_now()
            return JobState.FAILED, values, f"{end.reason}; a session is not requeued"
        if o is Outcome.PREEMPTED:
            if not job.requeue_on_preempt:
                values["ended_at"] = from_now()
                return JobState.FAILED, values, f"{end.reason}; not requeued (--no-requeue)"
        # a host problem must not spin: the same job on the same broken host, 1000x a second
        values["not_before"] = from_now(backoff_s) if o is Outcome.HOST_ERROR else None
        return QUEUED, values, f"{end.reason}; requeued"
    values["ended_at"] = from_now()
    target = {Outcome.SUCCEEDED: JobState.SUCCEEDED, Outcome.CANCELLED: JobState.CANCELLED,
              Outcome.TIMEOUT: JobState.TIMEOUT}[o]
    return target, values, end.reason


def expired_leases(s: Session, limit: int = 100) -> set[tuple[int, int]]:
    """(job, attempt) of active jobs whose lease ran out: their host stopped renewing."""
    rows = s.execute(
        select(Job.id, Job.attempt)
        .where(Job.state.in_([ASSIGNED.value, RUNNING.value, PREEMPTING.value]),
               Job.lease_expires_at < db_now())
        .limit(limit)
    ).all()
    return {(r.id, r.attempt) for r in rows}


def requeue_expired(s: Session, suspects: set[tuple[int, int]], *,
                    retry_backoff_s: float, host_retries: int = HOST_RETRIES) -> list[int]:
    """The reaper: of `suspects`, requeue those whose lease is still expired now.

    The rows are locked (and rows a renewal holds are skipped), so a lease renewed
    meanwhile is never taken away.
    """
    if not suspects:
        return []
    rows = s.execute(
        select(Job.id, Job.attempt, Job.host, Job.workers)
        .where(Job.id.in_(sorted(j for j, _ in suspects)),
               Job.state.in_([ASSIGNED.value, RUNNING.value, PREEMPTING.value]),
               Job.lease_expires_at < db_now())
        .with_for_update(skip_locked=True)
    ).all()
    done, silent = [], []
    for r in rows:
        if (r.id, r.attempt) not in suspects:
            continue
        end = Ending(Outcome.LOST, f"lease expired: host {r.host} stopped answering")
        if finish(s, r.id, r.attempt, r.host, end, retry_backoff_s=retry_backoff_s,
                  actor="reaper", host_retries=host_retries) is not None:
            done.append(r.id)
            if r.workers is None:  # a slice job's `host` is its slice (gangs.sweep)
                silent.append(r.host)
    # the job goes elsewhere, and nothing new goes where it was until that host is heard
    # from: its heartbeat may still look fresh (TPUQ_HOST_STALE_S is no shorter than a
    # lease), and a dead host given the job again would cost another whole lease
    hosts.mark_lost(s, silent)
    return done


def requeue_rebooted(s: Session, host: str, boot_id: str, *, assigned_before: float,
                     retry_backoff_s: float, host_retries: int = HOST_RETRIES) -> list[int]:
    """At agent start: attempts on this host from an earlier boot are over; requeue now.
    Only those assigned before `assigned_before` (the agent's registration, database
    clock): once registered, the host takes new work while it still recovers."""
    rows = s.execute(
        select(Job.id, Job.attempt, Attempt.boot_id)
        .join(Attempt, (Attempt.job_id == Job.id) & (Attempt.number == Job.attempt))
        .where(Job.host == host, Job.state.in_([ASSIGNED.value, RUNNING.value, PREEMPTING.value]),
               Attempt.assigned_at < assigned_before)
    ).all()
    done = []
    for r in rows:
        if r.boot_id is not None and r.boot_id == boot_id:
            continue  # same boot: maybe still running as an orphan; the supervisor decides
        why = "host rebooted" if r.boot_id else "agent restarted before the job started"
        end = Ending(Outcome.PREEMPTED, why) if r.boot_id else Ending(Outcome.LOST, why)
        if finish(s, r.id, r.attempt, host, end, retry_backoff_s=retry_backoff_s,
                  actor="agent", host_retries=host_retries) is not None:
            done.append(r.id)
    return done


def assigned_to(s: Session, host: str) -> list[tuple[int, int]]:
    """(job, attempt) of everything assigned to `host` and not started yet."""
    rows = s.execute(select(JOBS.c.id, JOBS.c.attempt)
                     .where(JOBS.c.host == host, JOBS.c.state == ASSIGNED.value)).all()
    return [(r.id, r.attempt) for r in rows]


def active_on_host(s: Session, host: str, assigned_before: float | None = None
                   ) -> list[tuple[Job, Attempt]]:
    """Jobs active on `host` with their current attempts; with `assigned_before`
    (database clock), only attempts assigned before then."""
    q = select(Job, Attempt).join(
        Attempt, (Attempt.job_id == Job.id) & (Attempt.number == Job.attempt)).where(
        Job.host == host, Job.state.in_([ASSIGNED.value, RUNNING.value, PREEMPTING.value]))
    if assigned_before is not None:
        q = q.where(Attempt.assigned_at < assigned_before)
    rows = s.execute(q).all()
    return [(r[0], r[1]) for r in rows]
