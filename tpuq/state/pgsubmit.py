"""A team submit from a machine with no agent (a laptop, a login VM), on psycopg alone.

Loading SQLAlchemy, its ORM and tpuq's models cost about 200 ms before the first
statement, twice what the rest of such a submit costs. This path writes the same rows
the handlers do (api/handlers.py `submit`, state/jobs.py `submit`), decided by the same
admission rules (state/admission_rules.py) on the same facts, in three round trips: who
the caller is and the schema; admission's facts; the job, its first event and the
agents' wake-up, sent together with the commit.

It serves the plain case only and declines the rest to the handlers (`None`): an array,
a function, dependencies, a slice job, a resubmit, notification destinations (their
rule), an unknown team (its refusal's hint), a log budget overrun (its warning), a schema
other than the one this code writes, and any error the server answers (the handlers run
it again and say it in their words: nothing was committed). A connection lost while the
commit was on its way is the one case that cannot be declined: the job may be queued.
tests/state/test_pgsubmit.py holds both ways to the same rows, warnings and refusals.
"""

from __future__ import annotations

from tpuq import gcpause
from tpuq.errors import TpuqError
from tpuq.protocol import Failure, Refusal, Submitted
from tpuq.spec import JobSpec, SpecError
from tpuq.state import admission_rules
from tpuq.state.pgconnect import PG_CONNECT_ARGS, WAKE_CHANNEL, conninfo
from tpuq.state.states import HELD, QUEUED
from tpuq.state.versions import MIN_CODE_KEY, READ_SQL, SCHEMA_HEAD, Schema

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
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


def serves(req: Submit) -> bool:
    """Whether this path may take the request (else the handlers do)."""
    spec = req.spec
    return not (req.array or req.function or req.after or req.after_any or req.after_tasks
                or req.after_any_tasks or spec.get("resubmit_of") is not None
                or spec.get("notify_to"))


class Submitter:
    """One connection, kept for the client's later submits (a sweep's thousand)."""

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

        try:
            conn = self._connection(psycopg)
        except psycopg.Error:
            return None  # the handlers connect again, and say why they cannot
        try:
            return self._submit(conn, req)
        except SpecError as e:
            conn.rollback()
            return Refusal(kind=e.kind, error=str(e))
        except _Declined:
            conn.rollback()
            return None
        except _Unsure as e:
            self.close()
            return Refusal(kind=Failure.UNAVAILABLE, error=(
                f"the database connection was lost while the job was being queued ({e}): "
                "it may or may not be in the queue (see `tpuq status --mine`)"))
        except psycopg.Error:
            self.close()
            return None  # refused by the server, or lost before the commit: nothing written

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _connection(self, psycopg: Any) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.conninfo, **PG_CONNECT_ARGS)
        return self._conn

    def _submit(self, conn: Any, req: Submit) -> Reply:
        import psycopg
        from psycopg.types.json import Json

        cfg = self.settings
        with conn.pipeline():
            name, privileged, admin, revision, min_code = conn.execute(
                _WHO, {"k": MIN_CODE_KEY}).fetchone()
            schema = Schema(revision, min_code)
            if schema.revision != SCHEMA_HEAD and not (
                    schema.newer_than(SCHEMA_HEAD) and schema.admits(SCHEMA_HEAD)):
                raise _Declined  # the handlers say what to upgrade
            owner = cfg.user_name if privileged else name  # as client.Client._caller
            admin = bool(privileged or admin)
            spec = JobSpec.from_dict({**req.spec, "owner": owner})
            if spec.workers is not None:
                raise _Declined  # a slice job: its own admission
            facts, over_budget = self._facts(conn, spec, admin)
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
            # a statement of its own: row security checks that the event's job is the
            # caller's, which a statement cannot see of a row its own WITH inserted
            conn.execute("INSERT INTO job_events (job_id, at, from_state, to_state, attempt, "
                         "reason, actor) VALUES (currval(pg_get_serial_sequence('jobs', 'id')), "
                         f"{_NOW}, NULL, %(state)s, 0, 'submitted', %(owner)s)", values)
            conn.execute(f"NOTIFY {WAKE_CHANNEL}")  # heard once the commit lands
            try:
                conn.commit()
                job_id = inserted.fetchone()[0]
            except psycopg.Error as e:
                if e.sqlstate:  # the server refused it (row security, a constraint)
                    raise
                raise _Unsure(str(e).strip().splitlines()[0] if str(e).strip()
                              else type(e).__name__) from None
        return Submitted(id=int(job_id), tasks=[], warnings=warnings)

    def _facts(self, conn: Any, spec: JobSpec, admin: bool
               ) -> tuple[admission_rules.Facts, bool]:
        """Admission's facts, and whether the owner's logs are over a budget anywhere:
        sent together, one round trip."""
        args = {"team": spec.team, "owner": spec.owner, "tpu_type": spec.tpu_type}
        team_rows = conn.execute(_TEAM, args)
        member_rows = conn.execute(_MEMBER, args)
        host_rows = conn.execute(_SIZES_OF_TYPE if spec.tpu_type else _SIZES, args)
        budget_rows = conn.execute(_OVER_BUDGET, args)
        row = team_rows.fetchone()
        team = None if row is None else admission_rules.TeamCaps(
            name=row[0], max_chips=row[1], max_chips_per_user=row[2],
            max_chips_by_type=dict(row[3] or {}))
        if admission_rules.needs_team_names(spec, team, self.settings.team):
            raise _Declined  # the handlers' refusal names the teams there are
        facts = admission_rules.Facts(
            team=team, member=member_rows.fetchone() is not None,
            sizes=admission_rules.sizes_of([r[0] for r in host_rows.fetchall()]))
        return facts, budget_rows.fetchone() is not None


class _Declined(TpuqError):
    """The handlers take this request (nothing was written)."""


class _Unsure(TpuqError):
    """The connection was lost with the commit on its way: the job may be queued."""
