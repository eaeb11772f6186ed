"""What the scheduler reads in one pass: queued jobs, hosts, chips in use, team limits
and usage.

Plain column selects (no ORM objects): a pass over 100,000 queued jobs must not build
100,000 mapped instances. Team usage is one query over recent attempts (usage.usage),
never a query per job or per team.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from sqlalchemy import JSON, Table, func, literal_column, select
from sqlalchemy.orm import Session

from tpuq.state import deps, direct, hosts
from tpuq.state import usage as usage_mod
from tpuq.state.clock import db_now
from tpuq.state.models import Allocation, Attempt, Host, Job, Team
from tpuq.state.states import ACTIVE, JobState


@dataclass
class Snapshot:
    now: float
    queued: list[QueuedRow] = field(default_factory=list)
    # (name, tpu_type, chips, why it takes no work or None, (slice, worker, slice type)
    # for a worker of a multi-host slice or None, chip counts it does not offer)
    hosts: list[tuple[str, str | None, tuple[int, ...], str | None,
                      tuple[str, int, str | None] | None, frozenset[int]]] = \
        field(default_factory=list)
    used: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    # team -> (chips running, {tpu_type: chips}, {user: chips})
    team_running: dict[str, tuple[int, dict[str, int], dict[str, int]]] = \
        field(default_factory=dict)
    teams: dict[str, Any] = field(default_factory=dict)  # rows of the teams table
    usage: dict[str, usage_mod.Usage] = field(default_factory=dict)
    # host -> chip -> when the job holding it reaches its time limit (jobs with a limit)
    ends: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    unmet: dict[int, tuple[int, ...]] = field(default_factory=dict)  # job -> jobs it awaits
    # of those, the array tasks: job -> (array id, index), for the words of a reason
    unmet_tasks: dict[int, tuple[int, int]] = field(default_factory=dict)
    # a waiting job a failed "ok" dependency dooms -> (that dependency, its state)
    doomed: dict[int, tuple[int, str]] = field(default_factory=dict)
    array_running: dict[int, int] = field(default_factory=dict)  # throttled array -> tasks on
    # host -> (its agent's shared checkpoint root or None, its TPUQ_HOME): where a job's
    # checkpoints go there (tpuq/checkpoints.py)
    storage: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    draining: set[str] = field(default_factory=set)
    # a queued job whose checkpoints are on one host's disk -> when its last attempt ended
    left_home: dict[int, float] = field(default_factory=dict)


# Core columns (no ORM layer): this runs after every finished job
JOBS = cast(Table, Job.__table__)
ALLOCATIONS = cast(Table, Allocation.__table__)
ATTEMPTS = cast(Table, Attempt.__table__)
TEAMS = cast(Table, Team.__table__)


class QueuedRow(NamedTuple):
    """A queued job as a pass reads it: a plain named tuple, not SQLAlchemy's Row. Every
    pass reads every queued job, and at 1,000 of them Row's construction, attribute
    access and comparison (the view cache compares each row) were a quarter of the
    agent's CPU; these columns are integers, floats and strings, which the DBAPI
    returns as they are."""
    id: int
    team: str
    owner: str
    priority: int
    submitted_at: float
    chips: int | None
    tpu_type: str | None
    not_before: float | None
    attempt: int
    time_limit_s: float | None
    array_id: int | None
    array_throttle: int | None
    workers: int | None
    checkpoint_dir: str | None
    checkpoint_host: str | None
    checkpoint_seen_at: float | None
    begin_at: float | None


QUEUED_COLUMNS = tuple(JOBS.c[n] for n in QueuedRow._fields)

# queued job id -> (its row's version, its row) as a scheduler last read them: read()
# rereads only the rows whose version moved (jobs.row_version, kept by a trigger)
QueueCache = dict[int, tuple[int, QueuedRow]]
REREAD_MAX = 500  # more moved rows than this (or than half the queue): all are read again
HOST_COLUMNS = tuple(cast(Table, Host.__table__).c[n] for n in (
    "name", "tpu_type", "chips", "heartbeat_at", "draining", "busy_reason", "stopped_at",
    "slice_name", "slice_worker", "slice_type", "unavailable", "lost_reason",
    "code_revision", "disk_low", "lost_at", "handover_until", "checkpoint_root", "home"))


def read(s: Session, host_stale_s: float, half_life_h: float,
         usage: dict[str, usage_mod.Usage] | None = None,
         queue: QueueCache | None = None) -> Snapshot:
    """One consistent view for a pass. `usage`: chip-hours computed by a recent pass,
    reused because they move slowly and cost a scan of recent attempts; chips in use
    (the hard quota) are always read fresh. `queue`: the queued rows a pass of the same
    scheduler read (kept up to date here): then each queued job's id and version are
    read, and its whole row only when it is new or moved (_queued_rows)."""
    # the database clock and each host's booked chips come with the host rows: one round
    # trip instead of three; and the four reads every pass makes go together (on
    # PostgreSQL, one round trip: direct.rows_of_each). The open dependency links come
    # after the queued jobs (see deps.OPEN_LINKS), even with none queued: a held job can
    # be doomed too.
    host_rows, queued, open_links, teams = direct.rows_of_each(s, [
        (_host_select(s.get_bind().dialect.name), None, None),
        (_QUEUED, None, QueuedRow) if queue is None else (_QUEUED_VERSIONS, None, tuple),
        (deps.OPEN_LINKS, None, None), (_TEAMS, None, None)])
    now = float(host_rows[0].now if host_rows else s.execute(select(db_now())).scalar_one())
    snap = Snapshot(now=now)
    snap.queued = queued if queue is None else _queued_rows(s, queued, queue)
    links = deps.read_open(s, open_links)
    snap.unmet, snap.unmet_tasks, snap.doomed = links.unmet, links.tasks, links.doomed
    for h in host_rows:
        why = hosts.out_of_service(h, now, host_stale_s, h.min_code)
        member = None if h.slice_name is None else \
            (h.slice_name, h.slice_worker or 0, h.slice_type)
        snap.hosts.append((h.name, h.tpu_type, tuple(h.chips), why, member,
                           hosts.withheld(h.unavailable)))
        snap.storage[h.name] = (h.checkpoint_root, h.home)
        if h.draining:
            snap.draining.add(h.name)
        if h.booked:
            snap.used[h.name].update(h.booked)
    if snap.queued:
        left_home, throttled = False, set[int]()
        for r in snap.queued:  # one scan of a possibly long list
            if r.checkpoint_seen_at is not None and r.checkpoint_host is not None:
                left_home = True
            if r.array_throttle is not None and r.array_id is not None:
                throttled.add(r.array_id)
        if left_home:
            snap.left_home = _left_home(s)
        if throttled:
            snap.array_running = _array_running(s, throttled)
    if snap.queued and snap.used:
        for host, chip, end in direct.rows(s, _LIMITED_CHIPS):
            snap.ends[host][chip] = float(end)
    snap.teams = {t.name: t for t in teams}
    # chips in use per team only matter to limits, and limits live in team rows
    snap.team_running = usage_mod.team_running(s) if snap.teams else {}
    periods = {name: t.budget_period for name, t in snap.teams.items()}
    snap.usage = usage if usage is not None else usage_mod.usage(s, now, half_life_h, periods)
    return snap


def _queued_rows(s: Session, versions: list[Any], cache: QueueCache) -> list[QueuedRow]:
    """The queued rows, in the order of `versions` (each queued job's id and row
    version): the cached row of each job whose version is the cached one, the others
    read again (every row, when many moved). A row that left the queue between the two
    reads is left out; the jobs no longer queued are forgotten in time (prune)."""
    out, stale, get = [], [], cache.get
    for i, v in versions:  # one loop: at 2,000 queued, each pass over them counts
        hit = get(i)
        if hit is not None and hit[0] == v:
            out.append(hit[1])
        else:
            stale.append(i)
    if not stale:
        prune(cache, out)
        return out
    if len(stale) > min(REREAD_MAX, len(versions) // 2):
        cache.clear()
        for r in direct.rows(s, _QUEUED_VERSIONED):
            cache[r[0]] = (r[-1], QueuedRow._make(r[:-1]))
        return [row for _, row in cache.values()]
    for i in stale:
        cache.pop(i, None)
    for r in s.execute(select(*QUEUED_COLUMNS, JOBS.c.row_version).where(
            JOBS.c.id.in_(stale), JOBS.c.state == JobState.QUEUED.value)):
        cache[r[0]] = (r[-1], QueuedRow._make(r[:-1]))
    out = [hit[1] for i, _ in versions if (hit := get(i)) is not None]
    prune(cache, out)
    return out


def prune(cache: dict[int, Any], rows: list[Any]) -> None:
    """Forget the jobs that left the queue, once they are as many as the queue (and a
    few): a pass finds the ones still queued by id, so the others only take room, and
    dropping them one pass at a time cost a scan of the whole queue on every pass."""
    if len(cache) > 2 * len(rows) + 64:
        for gone in cache.keys() - {r.id for r in rows}:
            del cache[gone]


def _left_home(s: Session) -> dict[int, float]:
    """Queued jobs whose checkpoints are on one host's disk: when their last attempt
    ended (they wait for that host a bounded time from then)."""
    q = (select(JOBS.c.id, ATTEMPTS.c.ended_at)
         .join(ATTEMPTS, (ATTEMPTS.c.job_id == JOBS.c.id) & (ATTEMPTS.c.number == JOBS.c.attempt))
         .where(JOBS.c.state == JobState.QUEUED.value, JOBS.c.checkpoint_host.is_not(None),
                JOBS.c.checkpoint_seen_at.is_not(None)))
    return {int(i): float(at) for i, at in s.execute(q) if at is not None}


def _array_running(s: Session, arrays: set[int]) -> dict[int, int]:
    """Tasks of these arrays that hold or may hold chips now (assigned, running, stopping)."""
    active = [st.value for st in ACTIVE]
    q = (select(JOBS.c.array_id, func.count()).where(JOBS.c.array_id.in_(arrays),
                                                     JOBS.c.state.in_(active))
         .group_by(JOBS.c.array_id))
    return {int(a): int(n) for a, n in s.execute(q)}


def _limited_chips() -> Any:
    """(host, chip, end) of chips held by attempts whose job has a time limit: when the
    reservation of a job that waits for them can start (backfill, scheduler/policy.py)."""
    started = func.coalesce(ATTEMPTS.c.started_at, ATTEMPTS.c.assigned_at)
    return (select(ALLOCATIONS.c.host, ALLOCATIONS.c.chip,
                   (started + JOBS.c.time_limit_s).label("end"))
            .join(JOBS, JOBS.c.id == ALLOCATIONS.c.job_id)
            .join(ATTEMPTS, (ATTEMPTS.c.job_id == ALLOCATIONS.c.job_id)
                  & (ATTEMPTS.c.number == ALLOCATIONS.c.attempt))
            .where(JOBS.c.time_limit_s.is_not(None)))


def _booked_chips(dialect: str) -> Any:
    """The chips booked on the outer host row, as a JSON array (NULL when none)."""
    agg = func.json_agg if dialect == "postgresql" else func.json_group_array
    return (select(agg(ALLOCATIONS.c.chip, type_=JSON))
            .where(ALLOCATIONS.c.host == literal_column("hosts.name"))
            .scalar_subquery())


# The statements of every pass, built once (building one costs as much as running it on
# a small database: a pass runs after every finished job)
_HOST_SELECTS: dict[str, Any] = {}
_QUEUED = select(*QUEUED_COLUMNS).where(JOBS.c.state == JobState.QUEUED.value)
_QUEUED_VERSIONS = select(JOBS.c.id, JOBS.c.row_version).where(
    JOBS.c.state == JobState.QUEUED.value)
_QUEUED_VERSIONED = select(*QUEUED_COLUMNS, JOBS.c.row_version).where(
    JOBS.c.state == JobState.QUEUED.value)
_LIMITED_CHIPS = _limited_chips()
_TEAMS = select(TEAMS)


def _host_select(dialect: str) -> Any:
    """Every host with the database clock, its booked chips and the oldest code admitted:
    one round trip instead of three."""
    if dialect not in _HOST_SELECTS:
        _HOST_SELECTS[dialect] = select(*HOST_COLUMNS, db_now().label("now"),
                                        _booked_chips(dialect).label("booked"),
                                        hosts.min_code_sql().label("min_code"))
    return _HOST_SELECTS[dialect]
