"""What a metrics scrape reads: counts of what is open now, and the attempts that started
or ended in a span of time (tpuq/web/metrics.py folds those into running totals).

Plain column selects and GROUP BYs that indexes answer (migration 0019): a scrape of a
deployment with 10,000 open and 100,000 ended jobs must stay within a few tens of
milliseconds, so nothing here reads every attempt except `starts`/`ends` over a span
the caller chooses (all of history once, then only what is new).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, and_, func, literal_column, select
from sqlalchemy.orm import Session, aliased

from tpuq.state import hosts as hosts_mod
from tpuq.state import leader
from tpuq.state.clock import db_now
from tpuq.state.models import (
    Allocation,
    Attempt,
    FleetMember,
    Host,
    Job,
    Leader,
    Notification,
    Team,
)
from tpuq.state.states import ACTIVE, NOT_CHARGED, WAITING, Outcome

OPEN_STATES = tuple(st.value for st in (*WAITING, *ACTIVE))
# attempts that ended because of the host or a notice, not the job: work since the
# last checkpoint is lost, and the next attempt is a resumption
INTERRUPTED = (Outcome.PREEMPTED.value, Outcome.LOST.value)
_NOT_CHARGED = tuple(o.value for o in NOT_CHARGED)
HOST_STATES = ("ok", "draining", "busy", "notice", "silent", "stopped", "lost", "outdated",
               "unavailable", "fleet_waiting")
CAUSES = ("maintenance", "spot", "requested", "agent_stop", "reboot", "host_lost", "other")


def now(s: Session) -> float:
    return float(s.execute(select(db_now())).scalar_one())


def open_jobs(s: Session) -> dict[tuple[str, str], int]:
    """(team, state) -> jobs, for every open state."""
    q = (select(Job.team, Job.state, func.count()).where(Job.state.in_(OPEN_STATES))
         .group_by(Job.team, Job.state))
    return {(team, state): int(n) for team, state, n in s.execute(q)}


@dataclass(frozen=True)
class HostCount:
    name: str
    tpu_type: str | None
    chips: int
    used: int
    state: str  # one of HOST_STATES


def host_state(row: Any, now: float, stale_s: float, min_code: str | None) -> str:
    """The one word for why a host takes work or not (the same rule as
    hosts.out_of_service, which `tpuq status` and the scheduler use)."""
    why = hosts_mod.out_of_service(row, now, stale_s, min_code)
    if why is None:
        return "ok"
    if why == "agent stopped" or why.startswith("handed over"):
        return "stopped"
    if why.startswith("silent"):
        return "silent"
    if why.startswith("lost:"):
        return "lost"  # the fleet controller saw its VM go
    if why.startswith("agent's tpuq is older"):
        return "outdated"
    if why.startswith("offers no chip shape") or getattr(row, "disk_low", None):
        return "unavailable"
    if why.startswith("busy: notice:"):
        return "notice"
    if why.startswith("busy"):
        return "busy"
    return "draining"


def host_counts(s: Session, now: float, stale_s: float) -> list[HostCount]:
    used = dict(s.execute(select(Allocation.host, func.count()).group_by(Allocation.host)).all())
    rows = s.execute(select(Host.name, Host.tpu_type, Host.chips, Host.heartbeat_at,
                            Host.draining, Host.busy_reason, Host.stopped_at, Host.lost_reason,
                            Host.code_revision, Host.unavailable, Host.disk_low,
                            Host.lost_at, Host.handover_until)).all()
    min_code = hosts_mod.min_code(s)
    return [HostCount(h.name, h.tpu_type, len(h.chips or ()), int(used.get(h.name, 0)),
                      host_state(h, now, stale_s, min_code)) for h in rows]


def teams(s: Session) -> list[Any]:
    return list(s.execute(select(Team.name, Team.budget_chip_hours, Team.budget_period,
                                 Team.grant_expires_at, Team.max_chips)))


def notifications_failed(s: Session) -> int:
    q = select(func.count()).select_from(Notification).where(Notification.state == "failed")
    return int(s.execute(q).scalar_one())


def scheduler_passes(s: Session, role: str = leader.SCHEDULER) -> Any:
    """The leader's pass count, total and last duration (None before any leader)."""
    return s.execute(select(Leader.pass_count, Leader.pass_seconds_sum,
                            Leader.pass_seconds_last).where(Leader.role == role)).first()


# ---- attempts over a span of time ------------------------------------------------------------

ATTEMPTS = cast(Table, Attempt.__table__)


def starts(s: Session, lo: float, hi: float) -> list[Any]:
    """Attempts that started in [lo, hi): (team, waited_s, after, started_at) where `after` is how
    the attempt before it ended (None for a first attempt) and `waited_s` the time from
    the job's submission, or the end of that attempt, to this start."""
    prev = aliased(Attempt)
    queued_since = func.coalesce(prev.ended_at, Job.submitted_at)
    q = (select(Job.team, (Attempt.started_at - queued_since).label("waited_s"),
                prev.outcome.label("after"), Attempt.started_at)
         .join(Job, Job.id == Attempt.job_id)
         .outerjoin(prev, and_(prev.job_id == Attempt.job_id,
                               prev.number == Attempt.number - literal_column("1")))
         .where(Attempt.started_at >= lo, Attempt.started_at < hi))
    return list(s.execute(q).all())


ENDED_COLUMNS = (Job.team, Attempt.outcome, Attempt.reason, Attempt.chips, Attempt.assigned_at,
                 Attempt.started_at, Attempt.ended_at, Attempt.checkpoint_at)


def ends(s: Session, lo: float, hi: float) -> list[Any]:
    """Attempts that ended in [lo, hi), with what goodput, lost work and the teams'
    charged chip-hours need."""
    q = (select(*ENDED_COLUMNS).join(Job, Job.id == Attempt.job_id)
         .where(Attempt.ended_at >= lo, Attempt.ended_at < hi))
    return list(s.execute(q).all())


def running(s: Session) -> list[Any]:
    """Attempts that have not ended (their chip-seconds so far)."""
    q = select(*ENDED_COLUMNS).join(Job, Job.id == Attempt.job_id).where(Attempt.ended_at.is_(None))
    return list(s.execute(q).all())


def cause(outcome: str | None, reason: str | None) -> str:
    """Why an interrupted attempt ended, as one of CAUSES: from the words the agent and
    the reaper record (agent/main.py preempt_all, metadata.Notice, attempts.py)."""
    text = reason or ""
    if "host rebooted" in text or "agent restarted" in text:
        return "reboot"
    if outcome == Outcome.LOST.value:
        return "host_lost"
    if "instance preempted" in text:
        return "spot"
    if "maintenance" in text:
        return "maintenance"
    if "agent stopping" in text:
        return "agent_stop"
    if "requested by" in text:
        return "requested"
    return "other"


# fleet/reconcile.py: a member removed from the fleet with nothing of it left
_RETIRED = "nothing: removed from the fleet"


def fleet_slots_waiting(s: Session) -> int:
    """VMs the fleet controller keeps that are not up yet (the `fleet_waiting` host
    state): waiting for capacity, being created or replaced, or up with no agent yet."""
    return int(s.scalar(select(func.count()).select_from(FleetMember).where(
        ~((FleetMember.phase == "up") & FleetMember.waiting_for.is_(None)),
        FleetMember.waiting_for.is_distinct_from(_RETIRED))) or 0)
