"""Alembic, driven from code.

The migrations live in the repository's top-level `migrations/` folder, which the
package build maps to `tpuq.migrations` (pyproject.toml), so a wheel carries them.

On SQLite a migration that changes a table rebuilds it (Alembic's batch mode: a new
table, the rows copied, the old one dropped, the new one renamed). With foreign keys
enforced, dropping a table that other rows refer to fails (`FOREIGN KEY constraint
failed [SQL: DROP TABLE jobs]`), so migrations run with enforcement off, as Alembic's
batch documentation and SQLite's ALTER TABLE procedure say, and every reference is
checked (`PRAGMA foreign_key_check`) before the transaction commits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine

from tpuq.errors import Failure, TpuqError

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory


class MigrationError(TpuqError, RuntimeError):
    """A migration left the database inconsistent; it was rolled back."""

    KIND = Failure.UNAVAILABLE


def migrations_dir() -> Path:
    """Where Alembic's env.py and versions are: beside the `tpuq` package being run when
    that is a checkout, else the installed `tpuq.migrations` package (a wheel)."""
    import importlib.util

    checkout = Path(__file__).resolve().parents[2] / "migrations"
    if (checkout / "versions" / "0001_core.py").is_file():
        return checkout
    try:
        spec = importlib.util.find_spec("tpuq.migrations")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("tpuq's migrations are missing from this installation")
    return Path(next(iter(spec.submodule_search_locations)))


def alembic_config(engine: Engine | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    # the options are configparser's, where % starts an interpolation: a path or URL with
    # one (a non-ASCII TPUQ_HOME is %-encoded in its URL) is written %%
    cfg.set_main_option("script_location", str(migrations_dir()).replace("%", "%%"))
    if engine is not None:
        url = engine.url.render_as_string(hide_password=False)
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    _run(engine, lambda cfg: command.upgrade(cfg, revision))


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    _run(engine, lambda cfg: command.downgrade(cfg, revision))


def _run(engine: Engine, act: Callable[[Config], None]) -> None:
    """`act` on one connection in one transaction; on SQLite with foreign keys off
    meanwhile (a no-op inside a transaction, so set before it begins) and checked after."""
    cfg = alembic_config(engine)
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            _pragma(conn, "PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                cfg.attributes["connection"] = conn
                act(cfg)
                if sqlite:
                    _check_references(conn)
        finally:
            if sqlite:
                _pragma(conn, "PRAGMA foreign_keys=ON")


def _pragma(conn: Connection, sql: str) -> None:
    """On the driver's connection: SQLAlchemy would begin a transaction first."""
    raw: Any = conn.connection.driver_connection
    raw.execute(sql)


def _check_references(conn: Connection) -> None:
    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        tables = sorted({f"{r[0]} -> {r[2]}" for r in broken})
        raise MigrationError(f"the migration would leave {len(broken)} row(s) referring to "
                             f"rows that do not exist ({', '.join(tables)}); nothing was changed")


def script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def heads() -> list[str]:
    return list(script().get_heads())


def known(revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return script().get_revision(revision) is not None
    except CommandError:
        return False


def downgrade_costs(conn: Connection, current: str, target: str) -> tuple[list[str], list[str]]:
    """What going from `current` down to `target` would cost: (open work it would lose or
    run wrongly: never done; records of ended work it would drop: done only on purpose).
    Each migration says so for itself (`downgrade_loses`, `downgrade_drops`)."""
    loses: list[str] = []
    drops: list[str] = []
    for rev in script().iterate_revisions(current, target):
        if rev.revision == target:
            continue
        mod = rev.module
        loses += [f"{w} (migration {rev.revision})" for w in mod.downgrade_loses(conn)]
        drops += [f"{w} (migration {rev.revision})"
                  for w in getattr(mod, "downgrade_drops", lambda _c: [])(conn)]
    return loses, drops
