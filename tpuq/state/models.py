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
    false,
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
    # an interactive session (`tpuq run`): started on its caller's terminal, never requeued
    session: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
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
    # what tpuq dropped from the submitter's environment (TPU variables it owns or clears)
    env_dropped: Mapped[list[str] | None] = mapped_column(JSON)
    # where its checkpoints live (a path or a gs:// URL) and, when that directory is on
    # one host's disk only, that host (a slice job's: its slice); set with each assignment
    checkpoint_dir: Mapped[str | None] = mapped_column(Text)
    checkpoint_host: Mapped[str | None] = mapped_column(String(128))
    # when its host's agent first saw that directory hold something (host-local only):
    # a job whose checkpoints are nothing yet waits for no host
    checkpoint_seen_at: Mapped[float | None] = mapped_column(Double)
    # --begin: not started before this time; --output: a file its owner also gets its
    # output in; which submit option came from where (#TPUQ directives, the command line)
    begin_at: Mapped[float | None] = mapped_column(Double)
    output: Mapped[str | None] = mapped_column(Text)
    option_sources: Mapped[dict[str, str] | None] = mapped_column(JSON)
    submitted_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)
    ended_at: Mapped[float | None] = mapped_column(Double)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    exit_signal: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    # how many times the row was updated: kept by the database (a trigger, migration
    # 0021), never written by tpuq; the scheduler rereads a queued row only when it moved
    row_version: Mapped[int] = mapped_column(BigInteger, server_default="0")


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
    # the total the job gave with that step, and when it should reach it (agent/attempts/outcome.py)
    checkpoint_total: Mapped[int | None] = mapped_column(BigInteger)
    eta_at: Mapped[float | None] = mapped_column(Double)
    # the newest migration of the code that assigned, then started, it (state/versions.py)
    code_revision: Mapped[str | None] = mapped_column(String(32))
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
    # chip count (or "*", the whole host) -> why this host does not offer it; NULL: all
    unavailable: Mapped[dict[str, str] | None] = mapped_column(JSON)
    # the fleet controller saw this host's TPU VM preempted or gone (tpuq/fleet/): it
    # gets no work until an agent registers the name again
    lost_reason: Mapped[str | None] = mapped_column(Text)
    # the newest migration its agent's code carries (state/versions.py)
    code_revision: Mapped[str | None] = mapped_column(String(32))
    # why the host takes no work for want of disk (its agent's log keeper), or None
    disk_low: Mapped[str | None] = mapped_column(Text)
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
    change, then claimed, sent and retried by an agent (agent/duties/notifier.py)."""

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


class FleetSlot(Base):
    """A declared slot (tpuq fleet apply): its full spec, stored before anything is made,
    so nothing depends on a VM that may vanish (tpuq/fleet/spec.py)."""

    __tablename__ = "fleet_slots"

    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    spec: Mapped[dict[str, object]] = mapped_column(JSON)
    applied_at: Mapped[float] = mapped_column(Double)
    applied_by: Mapped[str | None] = mapped_column(String(64))
    # removed from the file: kept until the controller deleted its VMs
    removed_at: Mapped[float | None] = mapped_column(Double)


class FleetMember(Base):
    """One of a slot's `count` VMs: which generation of it the controller keeps and what
    it waits for (tpuq/fleet/reconcile.py). Kept after the slot is removed from the file
    until its VM is deleted."""

    __tablename__ = "fleet_members"
    __table_args__ = (CheckConstraint(
        "phase IN ('waiting', 'creating', 'up', 'deleting')", name="fleet_members_phase"),)

    slot: Mapped[str] = mapped_column(String(40), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, default=1)
    phase: Mapped[str] = mapped_column(String(16))
    op_name: Mapped[str | None] = mapped_column(Text)  # the create or delete under way
    waiting_for: Mapped[str | None] = mapped_column(Text)
    since: Mapped[float] = mapped_column(Double)
    tries: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[float | None] = mapped_column(Double)
    error_kind: Mapped[str | None] = mapped_column(String(16))
    node_state: Mapped[str | None] = mapped_column(String(24))
    health: Mapped[str | None] = mapped_column(String(32))
    queued_state: Mapped[str | None] = mapped_column(String(32))
    ready_at: Mapped[float | None] = mapped_column(Double)  # this generation first READY
    joined_at: Mapped[float | None] = mapped_column(Double)  # its agents all registered
    creates: Mapped[int] = mapped_column(Integer, default=0)  # create calls, all generations
    updated_at: Mapped[float] = mapped_column(Double)


class FleetVm(Base):
    """A VM the controller made, while it was provisioned (READY until gone): what the
    fleet costs, against what jobs used of it (tpuq/fleet/costs.py)."""

    __tablename__ = "fleet_vms"

    node_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    slot: Mapped[str] = mapped_column(String(40), index=True)
    idx: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer)
    chips: Mapped[int] = mapped_column(Integer)
    ready_at: Mapped[float] = mapped_column(Double)
    gone_at: Mapped[float | None] = mapped_column(Double)
    gone_reason: Mapped[str | None] = mapped_column(Text)


class Leader(Base):
    """A lease row: whoever holds an unexpired lease runs the scheduler."""

    __tablename__ = "leaders"

    role: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[float] = mapped_column(Double)
    # the holder's scheduling passes while it leads, written with each renewal (metrics)
    pass_count: Mapped[int | None] = mapped_column(BigInteger)
    pass_seconds_sum: Mapped[float | None] = mapped_column(Double)
    pass_seconds_last: Mapped[float | None] = mapped_column(Double)


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


class BrokerAccount(Base):
    """A user's own broker account (queue/accounts.py): made by `tpuq user add`, put into
    Redis by every agent. The password's SHA-256 only, which Redis takes as it is."""

    __tablename__ = "broker_accounts"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    password_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Double)


class LogUsage(Base):
    """What one owner's job logs take on one host's disk (`place`: the host), as its
    agent last measured, beside the budget it holds them to."""

    __tablename__ = "log_usage"

    owner: Mapped[str] = mapped_column(String(128), primary_key=True)
    place: Mapped[str] = mapped_column(String(128), primary_key=True)
    bytes: Mapped[int] = mapped_column(BigInteger)
    budget: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Double)


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


class WebToken(Base):
    """A token an admin issued for signing in to the dashboard (`tpuq web token add`):
    only its SHA-256 is kept."""

    __tablename__ = "web_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user: Mapped[str] = mapped_column(String(64), index=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[float] = mapped_column(Double)
    created_by: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[float | None] = mapped_column(Double)
    revoked_at: Mapped[float | None] = mapped_column(Double)


# Usage accounting reads attempts that ended recently (or still run): see teams.usage().
Index("ix_attempts_ended_at", Attempt.ended_at)
# A metrics scrape reads attempts that started or ended since the last one, preemptions
# by outcome, and open jobs by state and team (state/aggregates.py)
Index("ix_attempts_started_at", Attempt.started_at)
Index("ix_attempts_outcome", Attempt.outcome)
Index("ix_jobs_state_team", Job.state, Job.team)

