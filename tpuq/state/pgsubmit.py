"""A plain team submit on psycopg alone: from a machine with no agent (a laptop, a login
VM), and an agent's submit for a caller on its socket.

Loading SQLAlchemy, its ORM and tpuq's models cost a submit from a machine with no agent
about 200 ms before its first statement, twice what the rest of it costs; and through
SQLAlchemy an agent's submit took eight round trips to the database. This path writes the
same rows the handlers do (api/handlers.py `submit`, state/jobs.py `submit`), decided by
the same admission rules (state/admission_rules.py) on the same facts, in two round trips:
admission's facts; the job, its first event (and, off the hosts, the agents' wake-up)
with the commit. Off the hosts a first one asks who the caller is and the schema.

It serves the plain case only and declines the rest to the handlers (None): an array, a
function, dependencies, a slice job, a resubmit, notification destinations (their rule),
an unknown team (its refusal's hint), a log budget overrun (its warning), a schema other
than the one this code writes, and any error the server answers (the handlers run it
again and say it in their words: nothing was committed). A connection lost while the
commit was on its way is the one case that cannot be declined: the job may be queued.
tests/state/test_pgsubmit.py holds both ways to the same rows, warnings and refusals.
"""

from __future__ import annotations

from functools import partial

from tpuq import gcpause
from tpuq.errors import TpuqError
from tpuq.protocol import Failure, Refusal, Submitted
from tpuq.spec import JobSpec, SpecError
from tpuq.state import admission_rules
from tpuq.state.pgconnect import PG_CONNECT_ARGS, WAKE_CHANNEL, conninfo, pipeline
from tpuq.state.states import HELD, QUEUED
from tpuq.state.versions import MIN_CODE_KEY, READ_SQL, SCHEMA_HEAD, Schema

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from tpuq.protocol import Reply, Submit
    from tpuq.settings import Settings

# the job's columns the ORM writes as JSON (a test holds this to state/models.py)
JSON_FIELDS = frozenset({"command", "env", "env_dropped", "option_sources"})
_NOW = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"  # clock.db_now

_WHO = ("SELECT current_user, tpuq_is_agent(), "
        "EXISTS (SELECT 1 FROM admins a WHERE a.name = current_user), w.* "
        f"FROM ({READ_SQL.format(k='%(k)s')}) AS w")
_TEAM = ("SELECT name, max_chips, max_chips_per_user, max_chips_by_type FROM teams "
         "WHERE name = %(team)s")
_MEMBER = 'SELECT 1 FROM team_members WHERE team = %(team)s AND "user" = %(owner)s'
_SIZES = "SELECT chips FROM hosts WHERE slice_name IS NULL"
_SIZES_OF_TYPE = _SIZES + " AND tpu_type = %(tpu_type)s"
_OVER_BUDGET = ("SELECT 1 FROM log_usage u WHERE u.owner = %(owner)s AND u.bytes > u.budget "
                "AND u.place IN (SELECT name FROM hosts) LIMIT 1")


# what this path writes of a request (`deployment` and `as_user` the agent checked); any
# other field set (an array, dependencies, a function, or one added later) is declined
_WRITTEN = frozenset({"spec", "held", "deployment", "as_user"})


def serves(req: Submit) -> bool:
    """Whether this path may take the request (else the handlers do)."""
    if any(getattr(req, name) for name in req.field_names() if name not in _WRITTEN):
        return False
    return req.spec.get("resubmit_of") is None and not req.spec.get("notify_to")


class Submitter:
    """A machine with no agent: one connection as the user's login role, kept for the
    process's later submits; who the caller is, the database says."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.conninfo = conninfo(settings.db_url)
        self._conn: Any = None

    def submit(self, req: Submit) -> Reply | None:
        """The reply (Submitted, or a refusal of the spec), or None: the handlers take it."""
        if self.conninfo is None or not serves(req):
            return None
        with gcpause.paused():
            import psycopg

        kept = self._conn is not None
        reply, usable = self._attempt(psycopg, req)
        if reply is None and not usable and kept:  # the kept connection was lost: anew, once
            reply, usable = self._attempt(psycopg, req)
        return reply

    def _attempt(self, psycopg: Any, req: Submit) -> tuple[Reply | None, bool]:
        """One try on this client's connection (made if there is none): `_answered`'s."""
        if self._conn is None:
            try:
                self._conn = psycopg.connect(self.conninfo, **PG_CONNECT_ARGS)
            except psycopg.Error:
                return None, False  # the handlers connect again, and say why they cannot
        reply, usable = _answered(self._conn, partial(self._submit, self._conn, req))
        if not usable:
            self.close()
        return reply, usable

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _submit(self, conn: Any, req: Submit) -> Reply:
        cfg = self.settings
        with pipeline(conn):
            who = conn.execute(_WHO, {"k": MIN_CODE_KEY}).fetchone()
            if who is None:
                raise _Declined  # no revision: the handlers say to upgrade
            name, privileged, admin, revision, min_code = who
            schema = Schema(revision, min_code)
            if schema.revision != SCHEMA_HEAD and not (
                    schema.newer_than(SCHEMA_HEAD) and schema.admits(SCHEMA_HEAD)):
                raise _Declined  # the handlers say what to upgrade
            # as client.Client._caller: the agents' role (or a superuser) acts for anyone
            owner = cfg.user_name if privileged else name
            return _write(conn, cfg, req, owner, bool(privileged or admin), wake=True)


def submit_as(engine: Any, settings: Settings, req: Submit, owner: str, admin: bool
              ) -> Reply | None:
    """An agent's submit for a caller its socket vouched for, on a connection of its
    engine's pool; None: the handlers take it. The agent rings the agents itself."""
    if not serves(req):
        return None
    raw = engine.raw_connection()
    conn = raw.driver_connection

    def write() -> Reply:
        with pipeline(conn):
            return _write(conn, settings, req, owner, admin, wake=False)

    usable = False
    try:
        reply, usable = _answered(conn, write)
    finally:
        if usable:
            raw.close()  # back to the pool, outside any transaction
        else:
            raw.invalidate()
    return reply


def _answered(conn: Any, submit: Callable[[], Reply]) -> tuple[Reply | None, bool]:
    """`submit`'s reply (None: declined, nothing written) and whether the connection may
    be used again (its transaction ended)."""
    import psycopg

    try:
        return submit(), True
    except SpecError as e:
        reply: Reply | None = Refusal(kind=e.kind, error=str(e))
    except _Declined:
        reply = None
    except _Unsure as e:
        return Refusal(kind=Failure.UNAVAILABLE, error=(
            f"the database connection was lost while the job was being queued ({e}): "
            "it may or may not be in the queue (see `tpuq status --mine`)")), False
    except psycopg.Error:
        reply = None  # refused by the server, or lost before the commit: nothing written
    try:
        conn.rollback()
    except psycopg.Error:
        return reply, False
    return reply, not conn.broken


def _write(conn: Any, cfg: Settings, req: Submit, owner: str, admin: bool, *,
           wake: bool) -> Reply:
    """Admit and queue the job for `owner`, in one transaction, in a pipeline: its facts
    in one round trip, the job, its event (and the wake-up) with the commit in another."""
    import psycopg
    from psycopg.types.json import Json

    spec = JobSpec.from_dict({**req.spec, "owner": owner})
    if spec.workers is not None:
        raise _Declined  # a slice job: its own admission
    facts, over_budget = _facts(conn, spec, cfg.team)
    if over_budget:
        raise _Declined  # the handlers word the warning
    warnings = admission_rules.decide(spec, facts, admin=admin, open_team=cfg.team)
    state = HELD if req.held else QUEUED
    values = {k: Json(v) if k in JSON_FIELDS else v for k, v in spec.to_dict().items()}
    values.update(workers=spec.workers, state=state.value, failures=0, preemptions=0, attempt=0)
    names = list(values)
    inserted = conn.execute(
        f"INSERT INTO jobs ({', '.join(names)}, submitted_at, updated_at) VALUES "
        f"({', '.join(f'%({n})s' for n in names)}, {_NOW}, {_NOW}) RETURNING id", values)
    # a statement of its own: row security checks that the event's job is the caller's,
    # which a statement cannot see of a row its own WITH inserted
    conn.execute("INSERT INTO job_events (job_id, at, from_state, to_state, attempt, "
                 "reason, actor) VALUES (currval(pg_get_serial_sequence('jobs', 'id')), "
                 f"{_NOW}, NULL, %(state)s, 0, 'submitted', %(owner)s)", values)
    if wake:
        conn.execute(f"NOTIFY {WAKE_CHANNEL}")  # heard once the commit lands
    try:
        conn.commit()
        job_id = inserted.fetchone()[0]
    except psycopg.Error as e:
        if _refused(conn, e):
            raise
        raise _Unsure(str(e).strip().splitlines()[0] if str(e).strip()
                      else type(e).__name__) from None
    return Submitted(id=int(job_id), tasks=[], warnings=warnings)


def _facts(conn: Any, spec: JobSpec, open_team: str) -> tuple[admission_rules.Facts, bool]:
    """Admission's facts, and whether the owner's logs are over a budget anywhere: sent
    together, one round trip."""
    args = {"team": spec.team, "owner": spec.owner, "tpu_type": spec.tpu_type}
    team_rows = conn.execute(_TEAM, args)
    member_rows = conn.execute(_MEMBER, args)
    host_rows = conn.execute(_SIZES_OF_TYPE if spec.tpu_type else _SIZES, args)
    budget_rows = conn.execute(_OVER_BUDGET, args)
    row = team_rows.fetchone()
    team = None if row is None else admission_rules.TeamCaps(
        name=row[0], max_chips=row[1], max_chips_per_user=row[2],
        max_chips_by_type=dict(row[3] or {}))
    if admission_rules.needs_team_names(spec, team, open_team):
        raise _Declined  # the handlers' refusal names the teams there are
    facts = admission_rules.Facts(
        team=team, member=member_rows.fetchone() is not None,
        sizes=admission_rules.sizes_of([r[0] for r in host_rows.fetchall()]))
    return facts, budget_rows.fetchone() is not None


# errors after which a commit on its way may have landed: the connection's end (08), the
# server ending the session (57: a shutdown while it waited on a replica, an admin's
# terminate), an internal error (XX)
_UNSURE_CLASSES = ("08", "57", "XX")


def _refused(conn: Any, e: Any) -> bool:
    """The server refused the transaction (row security, a constraint) on a connection
    that lives on: nothing was committed."""
    return bool(e.sqlstate) and not conn.broken and e.sqlstate[:2] not in _UNSURE_CLASSES


class _Declined(TpuqError):
    """The handlers take this request (nothing was written)."""


class _Unsure(TpuqError):
    """The connection was lost with the commit on its way: the job may be queued."""
