"""The one way a job's state changes.

Every change is a compare-and-set (`UPDATE ... WHERE id AND state AND attempt [AND host]`)
that must change exactly one row, and writes its `job_events` row in the same
transaction. A refused compare-and-set returns False: the caller was fenced out (a stale
doorbell, a lease that expired, a job cancelled meanwhile) and must do nothing more.
An attempt to make a transition the state machine does not allow is a bug: it raises.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, cast

from sqlalchemy import (
    ClauseElement,
    ColumnElement,
    Double,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    exists,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from tpuq.errors import Failure, TpuqError
from tpuq.state import direct
from tpuq.state.clock import FromNow, db_now
from tpuq.state.models import Job, JobEvent, Notification
from tpuq.state.states import (
    EVENT_PREEMPTED,
    EVENT_RESTARTED,
    EVENT_STARTED,
    TERMINAL,
    JobState,
    allowed,
)

# Core tables, not the ORM classes: these statements run several times per job, and the
# ORM's bulk-update machinery costs more than the round trip they save.
JOBS = cast(Table, Job.__table__)
EVENTS = cast(Table, JobEvent.__table__)
NOTIFICATIONS = cast(Table, Notification.__table__)


class InvalidTransition(TpuqError, ValueError):
    """A change of state the table (states.ALLOWED) does not allow: a bug."""

    KIND = Failure.AGENT_ERROR


def transition(
    s: Session,
    job_id: int,
    frm: Iterable[JobState],
    to: JobState,
    *,
    attempt: int | None = None,
    host: str | None = None,
    reason: str | None = None,
    actor: str | None = None,
    values: Mapping[str, Any] | None = None,
) -> bool:
    """Move job `job_id` from one of `frm` to `to`; True when this call made the change."""
    sources = tuple(frm)
    _check_allowed(sources, to)
    if len(sources) == 1:
        return transition_returning(s, job_id, sources[0], to, attempt=attempt, host=host,
                                    reason=reason, actor=actor, values=values) is not None
    guard = [JOBS.c.id == job_id]
    if attempt is not None:
        guard.append(JOBS.c.attempt == attempt)
    if host is not None:
        guard.append(JOBS.c.host == host)
    current = s.execute(select(JOBS.c.state, JOBS.c.attempt).where(*guard)).first()
    if current is None or JobState(current.state) not in sources:
        return False
    # rare (a few user commands): no need for the cached one-statement form below
    return transition_returning(s, job_id, JobState(current.state), to,
                                attempt=current.attempt, host=host, reason=reason,
                                actor=actor, values=values) is not None


CHUNK = 900  # ids in one IN list: under every SQLite's limit on bound parameters


def transition_many(s: Session, job_ids: Sequence[int], frm: JobState, to: JobState, *,
                    reason: str, actor: str, values: Mapping[str, Any] | None = None
                    ) -> list[int]:
    """`transition` for many jobs at once, set-based: one compare-and-set UPDATE per
    CHUNK ids (each job changes only if it is still in `frm`), their event rows in one
    insert, and the outbox rows of the owners who asked to hear of it. For user commands
    on whole arrays (`cancel --array`, `hold --array`): no riders, no attempt or host
    guard (a job in `frm` holds no attempt). Returns the ids it changed."""
    _check_allowed((frm,), to)
    changes: dict[str, Any] = {"state": to.value, "updated_at": db_now(), "reason": reason,
                               **(values or {})}
    changed: list[tuple[int, int]] = []
    for start in range(0, len(job_ids), CHUNK):
        chunk = list(job_ids[start:start + CHUNK])
        done = s.execute(update(JOBS).where(JOBS.c.id.in_(chunk), JOBS.c.state == frm.value)
                         .values(**changes).returning(JOBS.c.id, JOBS.c.attempt))
        changed += [(int(r.id), int(r.attempt)) for r in done]
    if not changed:
        return []
    now = s.execute(select(db_now())).scalar_one()
    s.execute(insert(EVENTS), [{"job_id": j, "at": now, "from_state": frm.value,
                                "to_state": to.value, "attempt": a, "reason": reason,
                                "actor": actor} for j, a in changed])
    ids = [j for j, _ in changed]
    if to in TERMINAL:
        cols, wanted = _told_rows(to.value)
        for start in range(0, len(ids), CHUNK):
            s.execute(insert(NOTIFICATIONS).from_select(
                list(cols), wanted.where(JOBS.c.id.in_(ids[start:start + CHUNK]))),
                {"tq_n_count": None, "tq_n_detail": None})
    return ids


@dataclass(frozen=True)
class Rider:
    """A write that must happen with a transition and only if it happens (an attempt row,
    chip rows). `build(gate)` makes its statement with bound parameters named as in
    `params`: guarded by `gate` (true only if the transition took place), or, given None,
    the plain statement to run after it. `shape` names what the statement looks like
    (never its values): statements are built once per shape and reused."""

    shape: Hashable
    build: Callable[[ColumnElement[bool] | None], Any]
    params: Mapping[str, Any]


def transition_returning(
    s: Session,
    job_id: int,
    frm: JobState,
    to: JobState,
    *,
    attempt: int | None = None,
    host: str | None = None,
    reason: str | None = None,
    actor: str | None = None,
    values: Mapping[str, Any] | None = None,
    returning: Sequence[Any] = (),
    riders: Sequence[Rider] = (),
) -> Any:
    """The compare-and-set from one state, with `returning` columns of the changed job row
    as a named tuple (`attempt` first; None when refused), its event row and its `riders`.

    On PostgreSQL all of it is one statement (data-modifying WITH queries, each rider
    gated on the change having happened): one round trip, atomic even without an explicit
    transaction (see Database.single). On SQLite the statements run one after another.
    Values may be plain, `clock.from_now(s)`, or SQL expressions (the statement is then
    built for this call only). Statements are built once per shape and reused: building
    and keying a statement of this size costs more than executing it.
    """
    _check_allowed((frm,), to)
    values = dict(values or {})
    told = _notification(to, values)
    if told is not None:
        riders = (*riders, told)
    params: dict[str, Any] = {"tq_job": job_id, "tq_attempt": attempt, "tq_host": host,
                              "tq_reason": reason, "tq_actor": actor}
    for col, v in values.items():
        if not isinstance(v, ClauseElement):
            params[f"tq_v_{col}"] = v.seconds if isinstance(v, FromNow) else v
    for r in riders:
        params.update(r.params)
    pg = s.get_bind().dialect.name == "postgresql"
    spec = _Shape(frm, to, attempt is not None, host is not None, reason is not None,
                  tuple((col, _kind(v)) for col, v in values.items()), tuple(returning),
                  tuple(riders))
    fixed = not any(isinstance(v, ClauseElement) for v in values.values())
    key = (pg, spec.key()) if fixed else None
    if pg:
        return _run(s, key, lambda: spec.one_statement(values), params)
    row = _run(s, key and (*key, "update"), lambda: spec.update(values), params)
    if row is not None:
        params["tq_event_attempt"] = row.attempt
        _run(s, key and (*key, "event"), lambda: spec.event(None), params)
        for i, r in enumerate(riders):
            _run(s, key and (*key, "rider", i), partial(r.build, None), params)
    return row


def _run(s: Session, key: Hashable | None, build: Callable[[], Any],
         params: Mapping[str, Any]) -> Any:
    """The first row of the statement of `key` (built once, run on the cursor:
    state/direct.py), or of a statement built for this call only (key None)."""
    if key is None:
        result = cast("CursorResult[Any]", s.execute(build(), params))
        return result.first() if result.returns_rows else None
    return direct.first(s, _statement(key, build), params)


# the words of spec.NOTIFY_EVENTS that ask to hear of each event (a new state, a
# preemption, or an attempt that starts over: its checkpoints are on a host it cannot
# reach, which whoever asked to hear of anything wants to know)
_TOLD: dict[str, tuple[str, ...]] = {
    EVENT_STARTED: ("start",), JobState.SUCCEEDED: ("end",), JobState.CANCELLED: ("end",),
    JobState.FAILED: ("end", "fail"), JobState.TIMEOUT: ("end", "fail"),
    EVENT_PREEMPTED: ("preempt",), EVENT_RESTARTED: ("end", "fail", "preempt")}


def _notification(to: JobState, values: Mapping[str, Any]) -> Rider | None:
    """The outbox row of this change, written only if the change happens and its owner
    asked to hear of it (jobs.notify): a start, an end, or a preemption (`values` counting one),
    which the sender tells of once the count exceeds TPUQ_NOTIFY_PREEMPTS."""
    count = values.get("preemptions")
    if to in TERMINAL:
        event = to.value
    elif to is JobState.RUNNING:
        event = EVENT_STARTED
    elif to is JobState.QUEUED and isinstance(count, int):
        event = EVENT_PREEMPTED
    else:
        return None
    return Rider(("notify", event), _notify_builder(event),
                 {"tq_n_count": count, "tq_n_detail": None})


def notification_rider(event: str, detail: str) -> Rider:
    """The outbox row of an event that is not a state change (`restarted`), told with
    `detail`, if the transition it rides on happens and the owner asked to hear of it."""
    return Rider(("notify", event), _notify_builder(event),
                 {"tq_n_count": None, "tq_n_detail": detail})


@cache
def _notify_builder(event: str) -> Callable[[ColumnElement[bool] | None], Any]:
    """The outbox INSERT of one event, gated or not (built once per event: it rides on
    every end of every job)."""
    cols, every = _told_rows(event)
    wanted = every.where(JOBS.c.id == bindparam("tq_job"))

    def build(gate: ColumnElement[bool] | None) -> Any:
        return insert(NOTIFICATIONS).from_select(
            list(cols), wanted if gate is None else wanted.where(gate))

    return build


def _told_rows(event: str) -> tuple[dict[str, Any], Any]:
    """The outbox columns of `event` and the SELECT of them for every job whose owner
    asked to hear of it (narrowed to the jobs concerned by the caller)."""
    words = _TOLD[event]
    cols: dict[str, Any] = {
        "job_id": JOBS.c.id, "event": literal(event, String),
        "preemptions": bindparam("tq_n_count", type_=Integer),
        "detail": bindparam("tq_n_detail", type_=Text), "created_at": db_now(),
        "state": literal("pending", String), "tries": literal(0, Integer), "next_at": db_now()}
    return cols, select(*cols.values()).where(or_(*(JOBS.c.notify.contains(w) for w in words)))


_STATEMENTS: dict[Hashable, Any] = {}  # bounded: one per shape, and shapes are few


def _statement(key: Hashable | None, build: Callable[[], Any]) -> Any:
    if key is None:
        return build()
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = _STATEMENTS[key] = build()
    return stmt


def _kind(v: Any) -> str:
    return "from_now" if isinstance(v, FromNow) else "sql" if isinstance(v, ClauseElement) \
        else "value"


@dataclass(frozen=True)
class _Shape:
    frm: JobState
    to: JobState
    by_attempt: bool
    by_host: bool
    with_reason: bool
    value_kinds: tuple[tuple[str, str], ...]
    returning: tuple[Any, ...]
    riders: tuple[Rider, ...]

    def key(self) -> Hashable:
        # columns compare by SQL (== builds an expression): key them by identity
        return (self.frm, self.to, self.by_attempt, self.by_host, self.with_reason,
                self.value_kinds, tuple(map(id, self.returning)),
                tuple(r.shape for r in self.riders))

    def update(self, values: Mapping[str, Any]) -> Any:
        guard = [JOBS.c.id == bindparam("tq_job"), JOBS.c.state == self.frm.value]
        if self.by_attempt:
            guard.append(JOBS.c.attempt == bindparam("tq_attempt"))
        if self.by_host:
            guard.append(JOBS.c.host == bindparam("tq_host"))
        changes: dict[str, Any] = {"state": self.to.value, "updated_at": db_now()}
        if self.with_reason:
            changes["reason"] = bindparam("tq_reason", type_=Text)
        for col, kind in self.value_kinds:
            if kind == "sql":
                changes[col] = values[col]
            elif kind == "from_now":
                changes[col] = db_now() + bindparam(f"tq_v_{col}", type_=Double)
            else:
                changes[col] = bindparam(f"tq_v_{col}", type_=JOBS.c[col].type)
        return update(JOBS).where(*guard).values(**changes) \
            .returning(JOBS.c.attempt, *self.returning)

    def event(self, changed: Any) -> Any:
        cols: dict[str, Any] = {"job_id": bindparam("tq_job", type_=Integer), "at": db_now(),
                "from_state": literal(self.frm.value, String),
                "to_state": literal(self.to.value, String),
                "reason": bindparam("tq_reason", type_=Text),
                "actor": bindparam("tq_actor", type_=String)}
        if changed is None:
            return insert(EVENTS).values(**cols, attempt=bindparam("tq_event_attempt"))
        return insert(EVENTS).from_select([*cols, "attempt"],
                                          select(*cols.values(), changed.c.attempt))

    def one_statement(self, values: Mapping[str, Any]) -> Any:
        changed = self.update(values).cte("changed")
        gate = exists(select(changed.c.attempt))
        ctes = [self.event(changed).cte("logged")]
        ctes += [r.build(gate).cte(f"rider{i}") for i, r in enumerate(self.riders)]
        return select(changed).add_cte(*ctes)


def _check_allowed(sources: tuple[JobState, ...], to: JobState) -> None:
    for f in sources:
        if not allowed(f, to):
            raise InvalidTransition(f"{f.value} -> {to.value} is not an allowed transition")
