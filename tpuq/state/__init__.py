"""The database is the truth: models, the one transition function, and all SQL.

- `models.py`       SQLAlchemy models (jobs, attempts, events, hosts, chips, teams)
- `states.py`       job states, attempt outcomes, allowed transitions
- `transitions.py`  the one guarded compare-and-set that changes a job's state
- `jobs.py`         what people do to jobs: submit, cancel, hold, resubmit
- `deps.py`         job dependencies: what a job waits for, who a failure dooms
- `admission_rules.py` what cannot run is refused at submit (type, chips, team, caps),
                    on the facts read (no SQLAlchemy)
- `admission.py`    those facts, read through SQLAlchemy
- `pgsubmit.py`     a plain team submit with no agent, on psycopg alone (no SQLAlchemy)
- `pgconnect.py`    how tpuq connects to PostgreSQL (options, URL, wake-up channel)
- `attempts.py`     an attempt's life: assign, start, renew, finish, the reaper
- `gangs.py`        a slice job's workers: assignment, start barrier, leases, the gang's end
- `hosts.py`        host rows: register, heartbeat, liveness, drain, busy
- `leader.py`       the scheduler's leader lease
- `snapshot.py`     what one scheduler pass reads
- `teams.py`        teams, members, limits
- `outbox.py`       notifications to send: claimed, sent, retried, given up
- `logusage.py`     what each owner's job logs take, host by host, and who is over budget
- `functions.py`    function jobs: the pickled call, the pickled outcome
- `admins.py`       who may change anyone's jobs; who a PostgreSQL session is
- `roles.py`        PostgreSQL login roles for users and agents
- `broker_accounts.py` users' broker accounts (name, password hash): agents apply them
- `wakeups.py`      wake-ups through the database (NOTIFY): rung off the hosts, heard by agents
- `history.py`      ended jobs over a period and what they cost (tpuq history)
- `usage.py`        chip-hours used (periods, decay) and the quota report
- `queries.py`      read-only views for the CLI
- `aggregates.py`   what a metrics scrape reads: open counts, attempts over a span
- `holdings.py`     who holds which chips until when (the start forecast)
- `timeline.py`     the dashboard's pictures: chips per host, attempts over days
- `webtokens.py`    the dashboard's sign-in tokens (digests only)
- `clock.py`        the database clock
- `db.py`           engines, sessions, the schema gate
- `direct.py`       the hot statements, run on the DBAPI cursor (compiled once)
- `versions.py`     which code may act on which schema (the database's minimum code)
- `migrate.py`      Alembic driven from code
- `outage.py`       which errors mean "database away", and retrying through them
"""
