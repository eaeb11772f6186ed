"""SQLAlchemy models: the database is the truth about what runs where.

Times are float epoch seconds taken from the database clock (see clock.py), so leases
never depend on a worker's clock and SQLite and PostgreSQL behave alike.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Job(Base):
    """What a person submitted. Runs as one or more attempts."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16), index=True)
    command: Mapped[list[str]] = mapped_column(JSON)
    cwd: Mapped[str] = mapped_column(Text)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    owner: Mapped[str] = mapped_column(String(64))
    team: Mapped[str] = mapped_column(String(64), index=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    chips: Mapped[int | None] = mapped_column(Integer)  # None = the whole host
    tpu_type: Mapped[str | None] = mapped_column(String(32))  # None = any
    stop_signal: Mapped[str] = mapped_column(String(16), default="SIGTERM")
    grace_s: Mapped[float] = mapped_column(Double)
    time_limit_s: Mapped[float | None] = mapped_column(Double)
    max_retries: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    requeue_on_preempt: Mapped[bool] = mapped_column(Boolean, default=True)
    tcmalloc: Mapped[bool] = mapped_column(Boolean, default=True)
    # the fencing token: bumped by every assignment, checked by every write of an attempt
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    host: Mapped[str | None] = mapped_column(String(128), index=True)
    lease_expires_at: Mapped[float | None] = mapped_column(Double)
    stop_request: Mapped[str | None] = mapped_column(String(16))
    not_before: Mapped[float | None] = mapped_column(Double)
    resubmit_of: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"))
    array_id: Mapped[int | None] = mapped_column(Integer, index=True)  # its first task's id
    array_index: Mapped[int | None] = mapped_column(Integer)  # TPUQ_ARRAY_INDEX
    array_throttle: Mapped[int | None] = mapped_column(Integer)  # tasks running at once
    # a slice job: one task on each of this many workers of one slice (None: one host);
    # its `host` is then the slice's name (tpuq/state/gangs.py)
    workers: Mapped[int | None] = mapped_column(Integer)
    # the events its owner hears of (end, fail, preempt; None: none) and where to
    # (Apprise URLs, one per line: may hold a token; agents read it, users never do)
    notify: Mapped[str | None] = mapped_column(String(32))
    notify_to: Mapped[str | None] = mapped_column(Text)
    # where its checkpoints live (a path or a gs:// URL) and, when that directory is on
    # one host's disk only, that host (a slice job's: its slice); set with each assignment
    checkpoint_dir: Mapped[str | None] = mapped_column(Text)
    checkpoint_host: Mapped[str | None] = mapped_column(String(128))
    # when its host's agent first saw that directory hold something (host-local only):
    # a job whose checkpoints are nothing yet waits for no host
    checkpoint_seen_at: Mapped[float | None] = mapped_column(Double)
    submitted_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)
    ended_at: Mapped[float | None] = mapped_column(Double)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    exit_signal: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)


class Attempt(Base):
    """One run of a job on one host."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(128), index=True)
    chips: Mapped[list[int]] = mapped_column(JSON)
    assigned_at: Mapped[float] = mapped_column(Double)
    boot_id: Mapped[str | None] = mapped_column(String(64))
    pid: Mapped[int | None] = mapped_column(Integer)
    proc_start: Mapped[int | None] = mapped_column(BigInteger)  # /proc/pid/stat starttime
    started_at: Mapped[float | None] = mapped_column(Double)
    ended_at: Mapped[float | None] = mapped_column(Double)
    outcome: Mapped[str | None] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    exit_signal: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)
    checkpoint_step: Mapped[int | None] = mapped_column(BigInteger)
    checkpoint_at: Mapped[float | None] = mapped_column(Double)
    # the total the job gave with that step, and when it should reach it (agent/outcome.py)
    checkpoint_total: Mapped[int | None] = mapped_column(BigInteger)
    eta_at: Mapped[float | None] = mapped_column(Double)
    # why this attempt starts without the job's earlier checkpoints (on a host it cannot
    # reach); None: it resumes from them, or it is the first
    started_over: Mapped[str | None] = mapped_column(Text)


class JobDep(Base):
    """Job `job_id` waits for job `after_id`: to succeed (kind "ok") or to end ("any")."""

    __tablename__ = "job_deps"
    __table_args__ = (CheckConstraint("kind IN ('ok', 'any')", name="job_deps_kind"),
                      CheckConstraint("job_id <> after_id", name="job_deps_not_self"))

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    after_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True, index=True)
    kind: Mapped[str] = mapped_column(String(8))


class JobEvent(Base):
    """The timeline: one row per state change, written in the same transaction."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    at: Mapped[float] = mapped_column(Double)
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str | None] = mapped_column(String(128))


class Host(Base):
    """A TPU host as its agent last described it."""

    __tablename__ = "hosts"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    tpu_type: Mapped[str | None] = mapped_column(String(32))
    chips: Mapped[list[int]] = mapped_column(JSON)
    boot_id: Mapped[str | None] = mapped_column(String(64))
    agent_pid: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[float | None] = mapped_column(Double)
    heartbeat_at: Mapped[float | None] = mapped_column(Double)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    busy_reason: Mapped[str | None] = mapped_column(Text)  # e.g. a foreign process on the TPU
    stopped_at: Mapped[float | None] = mapped_column(Double)  # clean agent shutdown
    # who holds the name (state/hosts.py): the agent's machine and state directory, and
    # its instance, a random id per start that every write of the row must name
    machine_id: Mapped[str | None] = mapped_column(String(64))
    home: Mapped[str | None] = mapped_column(Text)
    agent_instance: Mapped[str | None] = mapped_column(String(32))
    # a worker of a multi-host slice: the TPU node's name, its worker number, its type
    slice_name: Mapped[str | None] = mapped_column(String(128))
    slice_worker: Mapped[int | None] = mapped_column(Integer)
    slice_type: Mapped[str | None] = mapped_column(String(32))
    # the shared checkpoint root its agent uses (TPUQ_CHECKPOINT_ROOT); None: under its
    # own TPUQ_HOME, on this host's disk only
    checkpoint_root: Mapped[str | None] = mapped_column(Text)
    # the reaper requeued work whose lease this host stopped renewing: no work for it
    # until it is heard from again (a heartbeat after this)
    lost_at: Mapped[float | None] = mapped_column(Double)
    # its agent handed over (SIGUSR2): its jobs wait for a new agent until then
    handover_until: Mapped[float | None] = mapped_column(Double)


class Allocation(Base):
    """Chips held by an attempt. The primary key makes double booking impossible."""

    __tablename__ = "allocations"

    host: Mapped[str] = mapped_column(String(128), primary_key=True)
    chip: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)


class GangWorker(Base):
    """One worker of a slice job's attempt: its host, where it is in the gang's start
    barrier (assigned -> ready -> running -> ended), its own lease and how it ended."""

    __tablename__ = "gang_workers"
    __table_args__ = (CheckConstraint("state IN ('assigned', 'ready', 'running', 'ended')",
                                      name="gang_workers_state"),)

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(128), index=True)
    state: Mapped[str] = mapped_column(String(16))
    lease_expires_at: Mapped[float | None] = mapped_column(Double)
    pid: Mapped[int | None] = mapped_column(Integer)
    proc_start: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[float | None] = mapped_column(Double)
    ended_at: Mapped[float | None] = mapped_column(Double)
    outcome: Mapped[str | None] = mapped_column(String(16))
    untouched: Mapped[bool | None] = mapped_column(Boolean)  # ended before any stop signal
    exit_code: Mapped[int | None] = mapped_column(Integer)
    exit_signal: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)


class Notification(Base):
    """The outbox: one event of a job to tell its owner of, written with the job's state
    change, then claimed, sent and retried by an agent (agent/notifier.py)."""

    __tablename__ = "notifications"
    __table_args__ = (CheckConstraint("state IN ('pending', 'sent', 'failed', 'skipped')",
                                      name="notifications_state"),
                      Index("notifications_due", "state", "next_at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    event: Mapped[str] = mapped_column(String(16))  # the job's new state, or "preempted"
    preemptions: Mapped[int | None] = mapped_column(Integer)  # the job's count then
    created_at: Mapped[float] = mapped_column(Double)
    state: Mapped[str] = mapped_column(String(16))
    tries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_at: Mapped[float] = mapped_column(Double)
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    claimed_until: Mapped[float | None] = mapped_column(Double)
    sent_at: Mapped[float | None] = mapped_column(Double)
    last_error: Mapped[str | None] = mapped_column(Text)
    # the destinations (their line numbers in jobs.notify_to) already told: a retry
    # sends only to the others
    sent_to: Mapped[str | None] = mapped_column(String(64))
    # what the event was about, in the words of its moment (e.g. why a job started over)
    detail: Mapped[str | None] = mapped_column(Text)


class JobFunction(Base):
    """A function job's pickled callable and, once an attempt ran it, its outcome."""

    __tablename__ = "job_functions"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    result: Mapped[bytes | None] = mapped_column(LargeBinary)
    result_attempt: Mapped[int | None] = mapped_column(Integer)
    result_at: Mapped[float | None] = mapped_column(Double)


class Leader(Base):
    """A lease row: whoever holds an unexpired lease runs the scheduler."""

    __tablename__ = "leaders"

    role: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[float] = mapped_column(Double)


class Team(Base):
    """A team's share and limits. A team without a row has share 1 and no limits."""

    __tablename__ = "teams"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    share: Mapped[float] = mapped_column(Double, default=1.0)
    max_chips: Mapped[int | None] = mapped_column(Integer)
    max_chips_per_user: Mapped[int | None] = mapped_column(Integer)
    # {"v4-8": 8} or by family {"v4": 8}; see tpuq/scheduler/quota.py
    max_chips_by_type: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    budget_chip_hours: Mapped[float | None] = mapped_column(Double)
    budget_period: Mapped[str] = mapped_column(String(8), default="week")  # day/week/month
    grant_expires_at: Mapped[float | None] = mapped_column(Double)


class Admin(Base):
    """A user who may change anyone's jobs, hosts, quotas and admins (state/admins.py)."""

    __tablename__ = "admins"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)


class Meta(Base):
    """Facts about the database itself: `instance` is a random id made at its creation,
    so files of a database that was lost and recreated are never taken for its own."""

    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class TeamMember(Base):
    __tablename__ = "team_members"

    team: Mapped[str] = mapped_column(ForeignKey("teams.name", ondelete="CASCADE"),
                                      primary_key=True)
    user: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


# Usage accounting reads attempts that ended recently (or still run): see teams.usage().
Index("ix_attempts_ended_at", Attempt.ended_at)

