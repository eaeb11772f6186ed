"""What people do to jobs: submit, hold, release, cancel, preempt, resubmit.

Every state change goes through transitions.transition(); this module only decides
which change a user command means.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    Row,
    String,
    Table,
    bindparam,
    insert,
    literal,
    null,
    select,
    text,
    type_coerce,
)
from sqlalchemy import cast as cast_
from sqlalchemy import update as update_
from sqlalchemy.orm import Session
from sqlalchemy.sql.schema import ScalarElementColumnDefault
from sqlalchemy.types import UserDefinedType

from tpuq import runfn
from tpuq.arrays import INDEX, Tasks
from tpuq.jobjson import iso_time
from tpuq.spec import SPEC_FIELDS, JobSpec, format_duration
from tpuq.state import admission, direct, functions, queries
from tpuq.state.attempts import release_chips
from tpuq.state.clock import db_now
from tpuq.state.db import rows_changed
from tpuq.state.models import Job, JobEvent
from tpuq.state.states import (
    ASSIGNED,
    HELD,
    PREEMPTING,
    QUEUED,
    TERMINAL,
    JobState,
    StopRequest,
)
from tpuq.state.transitions import CHUNK, transition, transition_many
from tpuq.submitopts import Resubmission

JOBS = cast(Table, Job.__table__)
EVENTS = cast(Table, JobEvent.__table__)


class _EncodedJSON(UserDefinedType[str]):
    """A JSON column's value given as JSON text already (PostgreSQL casts it ::JSON)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "JSON"


# an array's task: its command and environment given as JSON text already encoded
_INSERT_TASK = insert(JOBS).values(command=type_coerce(bindparam("command_json"), _EncodedJSON()),
                                   env=type_coerce(bindparam("env_json"), _EncodedJSON()))


def submit(s: Session, spec: JobSpec, actor: str | None = None, held: bool = False) -> int:
    """Insert a new job (queued, or held) and its first event; returns its id.

    Every way into the queue ends here: the spec is validated (spec.py) before anything
    is written. SpecError for a bad spec, and when registered hosts exist and none can
    give the chips asked for.
    """
    spec.validate()
    admission.check_shape(s, spec)
    state = HELD if held else QUEUED
    values = spec.to_dict()
    values.update(workers=spec.workers, state=state.value)
    job_id = direct.first(s, _insert_job(tuple(values)), values)[0]
    direct.rows(s, _INSERT_EVENT, {
        "job_id": job_id, "to_state": state.value,
        "reason": f"resubmitted from job {spec.resubmit_of}" if spec.resubmit_of
        else "submitted", "actor": actor or spec.owner})
    return int(job_id)


# A job's row from its spec: one statement per set of fields given (a spec leaves out the
# later fields it does not set), built once and compiled once (state/direct.py), not an
# ORM insert whose values are keyed, compared and compiled on every submit.
_INSERT_JOB: dict[tuple[str, ...], Any] = {}


def _insert_job(names: tuple[str, ...]) -> Any:
    stmt = _INSERT_JOB.get(names)
    if stmt is None:
        # a column's own default, written out: a statement run on the cursor gets none
        defaults = {c.name: c.default.arg for c in JOBS.c
                    if isinstance(c.default, ScalarElementColumnDefault)
                    and c.name not in names}
        stmt = _INSERT_JOB[names] = insert(JOBS).values(
            {**defaults, **{n: bindparam(n, type_=JOBS.c[n].type) for n in names},
             "failures": 0, "preemptions": 0, "attempt": 0, "submitted_at": db_now(),
             "updated_at": db_now()}).returning(JOBS.c.id)
    return stmt


_INSERT_EVENT = insert(EVENTS).values(
    job_id=bindparam("job_id", type_=EVENTS.c.job_id.type), at=db_now(), from_state=None,
    to_state=bindparam("to_state", type_=EVENTS.c.to_state.type), attempt=0,
    reason=bindparam("reason", type_=EVENTS.c.reason.type),
    actor=bindparam("actor", type_=EVENTS.c.actor.type))


def submit_array(s: Session, tasks: Tasks, throttle: int | None, actor: str | None = None,
                 held: bool = False) -> list[int]:
    """Insert the tasks of an array (arrays.checked_tasks) in this one transaction; the
    first task's id is the array's id. Returns the tasks' ids, in index order.

    Three statements whatever the size, not the ORM's unit of work: the first task alone
    (its id is the array's), then every other task from one row of the values they share
    and the list of indices (`_insert_tasks`: the database writes each task's
    environment, the spec's with its TPUQ_ARRAY_INDEX, so it travels once, not once per
    task), then every task's event from the rows just written."""
    spec = tasks.spec
    admission.check_shape(s, spec)  # every task has the same shape
    state = HELD if held else QUEUED
    now = float(s.execute(select(db_now())).scalar_one())  # one value for every row
    common = {**spec.to_dict(), "workers": spec.workers, "state": state.value, "failures": 0,
              "preemptions": 0, "attempt": 0, "submitted_at": now, "updated_at": now,
              "array_throttle": throttle}
    env = common.pop("env")
    env.pop(INDEX, None)
    # a task's environment is this text, its index, and '"}': JSON as json.dumps writes it
    env_head = json.dumps(env)[:-1] + (", " if env else "") + f'{json.dumps(INDEX)}: "'
    common.pop("command")
    first_index = tasks.indices[0]
    first = int(s.execute(_INSERT_TASK.returning(JOBS.c.id), {
        **common, "array_index": first_index, "env_json": f'{env_head}{first_index}"}}',
        "command_json": json.dumps(tasks.command(0))}).scalar_one())
    s.execute(update_(JOBS).where(JOBS.c.id == first).values(array_id=first))
    by_index = {first_index: first}
    if len(tasks.indices) > 1:
        commands = [json.dumps(tasks.command(n)) for n in range(1, len(tasks.indices))] \
            if tasks.args else []
        by_index.update((index, job_id) for job_id, index in _insert_tasks(
            s, {**common, "array_id": first}, env_head, tasks.indices[1:], commands,
            json.dumps(spec.command)))
    reason = (literal("submitted (array ") + cast_(JOBS.c.array_id, String)
              + literal(", task ") + cast_(JOBS.c.array_index, String) + literal(")"))
    s.execute(insert(EVENTS).from_select(
        ["job_id", "at", "from_state", "to_state", "attempt", "reason", "actor"],
        select(JOBS.c.id, literal(now), null(), literal(state.value), literal(0), reason,
               literal(actor or spec.owner))
        .where(JOBS.c.array_id == first).order_by(JOBS.c.id)))
    return [int(by_index[i]) for i in tasks.indices]


def submit_batch(s: Session, specs: Sequence[JobSpec], held: Sequence[bool],
                 actor: str) -> list[int]:
    """Insert independent jobs in this one transaction (bulk statements, as an array's
    tasks but each its own spec); their ids, in order."""
    for spec in specs:
        spec.validate()
    for shape in {(sp.tpu_type, sp.chips): sp for sp in specs}.values():
        admission.check_shape(s, shape)
    now = float(s.execute(select(db_now())).scalar_one())
    rows = [{**spec.to_dict(), "workers": spec.workers, "state": (HELD if h else QUEUED).value,
             "failures": 0, "preemptions": 0, "attempt": 0, "submitted_at": now,
             "updated_at": now} for spec, h in zip(specs, held, strict=True)]
    ids = [int(i) for i in s.scalars(insert(Job).returning(Job.id, sort_by_parameter_order=True),
                                     rows)]
    s.execute(insert(JobEvent), [
        {"job_id": j, "at": now, "from_state": None, "to_state": r["state"], "attempt": 0,
         "reason": "submitted", "actor": actor} for j, r in zip(ids, rows, strict=True)])
    return ids


def _insert_tasks(s: Session, common: dict[str, Any], env_head: str, indices: Sequence[int],
                  commands: list[str], command: str) -> list[tuple[int, int]]:
    """(id, index) of each task inserted, in no particular order: one INSERT ... SELECT
    of the values every task shares (`common`) once for each index, each task's
    environment `env_head`, its index and '"}', its command the JSON of `commands` in
    the order of `indices` when given, else `command` (all the same).

    Sending each task's row was most of an array's submission: 10,000 copies of the
    same environment encoded, sent and parsed (bench/README.md)."""
    dialect = s.get_bind().dialect.name
    names = tuple(common)
    stmt = _TASK_INSERTS.get((dialect, names))
    if stmt is None:
        stmt = _TASK_INSERTS[(dialect, names)] = _task_insert(dialect, names)
    params: dict[str, Any] = {"env_head": env_head, "command": command}
    if dialect == "postgresql":
        params.update(common=json.dumps(common), indices=list(indices), commands=commands)
    else:
        params.update(common, indices=json.dumps(list(indices)), commands=json.dumps(commands))
    return [(int(i), int(n)) for i, n in s.execute(stmt, params)]


_TASK_INSERTS: dict[tuple[str, tuple[str, ...]], Any] = {}


def _task_insert(dialect: str, names: tuple[str, ...]) -> Any:
    """The statement of `_insert_tasks` for these shared columns. The names are columns of
    the jobs table (spec.to_dict's and submit_array's own), never input."""
    if not all(n in JOBS.c for n in names):
        raise ValueError(f"not columns of jobs: {sorted(set(names) - set(JOBS.c.keys()))}")
    into = f"INSERT INTO jobs ({', '.join(names)}, array_index, env, command)"
    if dialect == "postgresql":
        # the shared values typed by the table's own row type, the indices and commands
        # as two arrays of the same length (or no commands: NULLs)
        return text(
            f"{into} SELECT {', '.join(f'c.{n}' for n in names)}, t.i, "
            "CAST(:env_head || t.i || '\"}' AS JSON), "
            "COALESCE(CAST(t.cmd AS JSON), CAST(:command AS JSON)) "
            "FROM json_populate_record(CAST(NULL AS jobs), CAST(:common AS JSON)) AS c, "
            "unnest(CAST(:indices AS INTEGER[]), CAST(:commands AS TEXT[])) AS t(i, cmd) "
            "RETURNING id, array_index")
    # SQLite: the shared values as parameters converted by their columns' types
    return text(
        f"{into} SELECT {', '.join(f':{n}' for n in names)}, t.value, "
        "(:env_head || t.value || '\"}'), COALESCE(k.value, :command) "
        "FROM json_each(:indices) AS t LEFT JOIN json_each(:commands) AS k ON k.key = t.key "
        "RETURNING id, array_index"
    ).bindparams(*(bindparam(n, type_=JOBS.c[n].type) for n in names))


@dataclass(frozen=True)
class Result:
    """What a user command did to one job, in words."""

    job_id: int
    ok: bool
    message: str


_CURRENT = tuple(JOBS.c[n] for n in ("id", "state", "attempt", "owner", "stop_request",
                                        "stop_signal", "grace_s"))


def _current(s: Session, job_id: int) -> Row[Any] | None:
    """What a user command needs of a job (never its env: see queries.py)."""
    return s.execute(select(*_CURRENT).where(JOBS.c.id == job_id)).first()


def owner_of(s: Session, job_id: int) -> str | None:
    """The job's owner, or None when there is no such job."""
    return s.scalar(select(JOBS.c.owner).where(JOBS.c.id == job_id))


def owners_of(s: Session, job_ids: Sequence[int]) -> dict[int, str]:
    """Each existing job's owner (a job that does not exist is missing)."""
    out: dict[int, str] = {}
    for start in range(0, len(job_ids), CHUNK):
        chunk = list(job_ids[start:start + CHUNK])
        out.update((int(i), o) for i, o in s.execute(
            select(JOBS.c.id, JOBS.c.owner).where(JOBS.c.id.in_(chunk))))
    return out


# what a bulk command does set-based: the state it moves many jobs from, and to
_BULK: dict[str, tuple[tuple[JobState, JobState, str], ...]] = {
    "cancel": ((QUEUED, JobState.CANCELLED, "cancelled"), (HELD, JobState.CANCELLED, "cancelled")),
    "hold": ((QUEUED, HELD, "held"),),
    "release": ((HELD, QUEUED, "released"),),
    "preempt": (),
}


def act_on_many(s: Session, verb: str, job_ids: Sequence[int], actor: str) -> list[Result]:
    """cancel, preempt, hold or release each of `job_ids`, in order. The jobs that wait
    (queued, held: an array's thousands of tasks) change set-based, a few statements for
    all of them (transitions.transition_many); the rest one by one as `cancel` etc. do."""
    one = {"cancel": cancel, "preempt": preempt, "hold": hold, "release": release}[verb]
    states: dict[int, str] = {}
    for start in range(0, len(job_ids), CHUNK):
        chunk = list(job_ids[start:start + CHUNK])
        states.update((int(i), st) for i, st in s.execute(
            select(JOBS.c.id, JOBS.c.state).where(JOBS.c.id.in_(chunk))))
    done: dict[int, Result] = {}
    for frm, to, said in _BULK[verb]:
        wanted = [j for j in dict.fromkeys(job_ids) if states.get(j) == frm.value]
        verb_ = "cancelled" if to is JobState.CANCELLED else said
        for j in transition_many(s, wanted, frm, to, reason=f"{verb_} by {actor}", actor=actor,
                                 values={"ended_at": db_now()} if to in TERMINAL else None):
            done[j] = Result(j, True, said)
    return [done[j] if j in done else one(s, j, actor) for j in job_ids]


def update(s: Session, job_id: int, actor: str, *, priority: int | None = None,
           time_limit_s: float | None = None, begin_at: float | None = None) -> Result:
    """Change a job that has not started: its priority, its time limit, when it may begin
    (--begin; the scheduler reads it at its next pass, the reason names it)."""
    values: dict[str, Any] = {}
    if priority is not None:
        values["priority"] = priority
    if time_limit_s is not None:
        values["time_limit_s"] = time_limit_s
    if begin_at is not None:
        values["begin_at"] = begin_at
    job = _current(s, job_id)
    if job is None:
        return Result(job_id, False, "does not exist")
    if not values:
        return Result(job_id, False, "nothing to change (--priority, --time, --begin)")
    done = s.execute(update_(Job).where(Job.id == job_id, Job.state.in_([QUEUED.value, HELD.value]))
                     .values(**values, updated_at=db_now()))
    if not rows_changed(done):
        return Result(job_id, False, f"is {job.state}: only a queued or held job changes")
    what = ", ".join(_changed(k, v) for k, v in values.items())
    s.execute(insert(JobEvent).values(job_id=job_id, at=db_now(), from_state=job.state,
                                      to_state=job.state, attempt=job.attempt,
                                      reason=f"updated: {what}", actor=actor))
    return Result(job_id, True, f"updated: {what}")


def _changed(key: str, value: Any) -> str:
    """One change of `update`, as its event and its answer say it."""
    if key == "time_limit_s":
        return f"time_limit {format_duration(value)}"
    if key == "begin_at":
        return f"begin {iso_time(value)}"
    return f"{key} {value}"


def cancel(s: Session, job_id: int, actor: str) -> Result:
    """Queued/held jobs end at once; active ones get their stop signal via the agent."""
    return request_stop(s, job_id, actor, StopRequest.CANCEL)


def preempt(s: Session, job_id: int, actor: str) -> Result:
    """Stop a running job the way host maintenance would: signal, grace, requeue."""
    return request_stop(s, job_id, actor, StopRequest.PREEMPT)


def request_stop(s: Session, job_id: int, actor: str, kind: StopRequest,
                 why: str | None = None) -> Result:
    job = _current(s, job_id)
    if job is None:
        return Result(job_id, False, "does not exist")
    state = JobState(job.state)
    if state in TERMINAL:
        return Result(job_id, False, f"already {state.value}")
    if state in (QUEUED, HELD):
        if kind is StopRequest.PREEMPT:
            return Result(job_id, False, f"is {state.value}, not running")
        ok = transition(s, job_id, [state], JobState.CANCELLED, reason=f"cancelled by {actor}",
                        actor=actor, values={"ended_at": db_now()})
        return Result(job_id, ok, "cancelled" if ok else "changed meanwhile, try again")
    if state is ASSIGNED and kind is StopRequest.CANCEL:
        # not started yet: the agent's assigned->running compare-and-set will now fail
        ok = transition(s, job_id, [ASSIGNED], JobState.CANCELLED, attempt=job.attempt,
                        reason=f"cancelled by {actor}", actor=actor, values={"ended_at": db_now()})
        if ok:
            release_chips(s, job_id, job.attempt)
        return Result(job_id, ok, "cancelled" if ok else "changed meanwhile, try again")
    if state is ASSIGNED:
        return Result(job_id, False, "is starting; preempt it once it runs")
    if state is PREEMPTING and job.stop_request == StopRequest.CANCEL.value:
        return Result(job_id, True, "already stopping")
    ok = transition(s, job_id, [state], PREEMPTING, attempt=job.attempt,
                    reason=why or f"{kind.value} requested by {actor}", actor=actor,
                    values={"stop_request": kind.value})
    return Result(job_id, ok, f"stopping (signal {job.stop_signal}, grace {job.grace_s:g}s)")


def hold(s: Session, job_id: int, actor: str) -> Result:
    ok = transition(s, job_id, [QUEUED], HELD, reason=f"held by {actor}", actor=actor)
    return Result(job_id, ok, "held" if ok else _why_not(s, job_id, JobState.QUEUED))


def release(s: Session, job_id: int, actor: str) -> Result:
    ok = transition(s, job_id, [HELD], QUEUED, reason=f"released by {actor}", actor=actor)
    return Result(job_id, ok, "released" if ok else _why_not(s, job_id, JobState.HELD))


def _why_not(s: Session, job_id: int, needed: str) -> str:
    job = _current(s, job_id)
    if job is None:
        return "does not exist"
    return f"is {job.state}, not {needed}"


def resubmit(s: Session, job_ids: Iterable[int], owner: str,
             how: Resubmission) -> list[Result]:
    """New jobs from earlier specs, each linked to its original and owned by `owner`.

    The environment captured from the original owner's shell is theirs: a job of
    someone else's is resubmitted with the resubmitter's (`how.env`). A function job
    runs its stored call again, resubmitted by its owner only.
    """
    results = []
    for job_id in job_ids:
        spec = spec_of(s, job_id)
        if spec is None:
            results.append(Result(job_id, False, "does not exist"))
            continue
        call = functions.payload_of(s, job_id)
        refused = _function_refusal(spec, call, owner)
        if refused:
            results.append(Result(job_id, False, refused))
            continue
        new_id = submit(s, how.apply(spec, job_id, owner), actor=owner)
        if call is not None:
            functions.store_payload(s, new_id, call)
        results.append(Result(new_id, True, f"queued, resubmitting job {job_id}"))
    return results


def _function_refusal(spec: JobSpec, call: bytes | None, owner: str) -> str | None:
    """Why a function job cannot be resubmitted by `owner`, or None: its stored call
    runs again, but only as its owner (a pickle runs its writer's code when loaded)."""
    if call is None:
        if runfn.is_function_command(spec.command):
            return "is a function job whose stored call is gone: submit the function again"
        return None
    if spec.owner != owner:
        return (f"is {spec.owner}'s function job: its stored call would run {spec.owner}'s "
                f"code as you; only {spec.owner} resubmits it")
    return None


_SPEC_COLUMNS = tuple(JOBS.c[f] for f in SPEC_FIELDS if f not in queries.SECRET_COLUMNS)


def spec_of(s: Session, job_id: int) -> JobSpec | None:
    """The spec a job was submitted with (its env as this session may see it)."""
    row = s.execute(select(*_SPEC_COLUMNS).where(JOBS.c.id == job_id)).first()
    if row is None:
        return None
    env = queries.envs(s, [job_id]).get(job_id, {})
    return JobSpec(**{c.name: getattr(row, c.name) for c in _SPEC_COLUMNS}, env=env)


def failed_since(s: Session, since: float | None) -> list[int]:
    """Failed (or timed-out) jobs that ended after `since` and were not resubmitted yet."""
    resubmitted = select(Job.resubmit_of).where(Job.resubmit_of.is_not(None))
    q = select(Job.id).where(
        Job.state.in_([JobState.FAILED.value, JobState.TIMEOUT.value]),
        Job.id.not_in(resubmitted),
    )
    if since is not None:
        q = q.where(Job.ended_at >= since)
    return list(s.scalars(q.order_by(Job.id)))
