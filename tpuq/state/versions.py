"""Which code may act on which schema.

Code is named by the newest migration it carries (SCHEMA_HEAD); a database by the
migration it is at and by the oldest code it admits (`meta.min_code`, written by the
migration that last raised it: migrations/versions/0015). Revision ids are short
sequential numbers, so "newer" is a comparison of numbers.

- database older than the code: the code needs `tpuq db upgrade` (embedded: automatic);
- database newer, and it admits the code: the code works as usual (a later release whose
  migrations kept what this code reads and writes);
- database newer, and it does not: the code must not lead, assign or start jobs, and
  `tpuq db ...` refuses; the fix is a newer tpuq, never `tpuq db upgrade` with this one.
"""

from __future__ import annotations

from tpuq.records import Record

TYPE_CHECKING = False  # SQLAlchemy is not loaded here: a submit without it reads this too
if TYPE_CHECKING:
    from sqlalchemy import Connection

SCHEMA_HEAD = "0021"  # the newest migration; tests check it matches Alembic's single head
MIN_CODE_KEY = "min_code"
# the revision and the oldest code admitted, in one statement (a named parameter :k)
READ_SQL = ("SELECT v.version_num, (SELECT m.value FROM meta m WHERE m.key = {k}) "
            "FROM alembic_version v")


def rank(revision: str) -> int:
    return int(revision)


class Schema(Record, frozen=True):
    """Where a database is: its revision and the oldest code it admits (None: none said)."""

    revision: str | None
    min_code: str | None = None

    def newer_than(self, code: str) -> bool:
        return self.revision is not None and rank(self.revision) > rank(code)

    def older_than(self, code: str) -> bool:
        return self.revision is not None and rank(self.revision) < rank(code)

    def admits(self, code: str) -> bool:
        """May code whose newest migration is `code` act on this database?"""
        if self.min_code is not None and rank(self.min_code) > rank(code):
            return False
        # a database newer than code that predates the check names no minimum: such code
        # cannot know what the newer migrations changed
        return not self.newer_than(code) or self.min_code is not None

    def too_new_for(self, code: str, where: str) -> str | None:
        """Why code `code` must not act on this database (None when it may)."""
        if self.admits(code):
            return None
        needs = f"tpuq of schema {self.min_code} or later" if self.min_code else "a newer tpuq"
        return (f"database {where} is at schema {self.revision}, newer than this tpuq "
                f"(schema {code}), and needs {needs}: upgrade tpuq here "
                "(`tpuq db upgrade` with this version cannot help)")


def read(conn: Connection) -> Schema:
    """The schema of the database `conn` reaches, in one statement (the agent asks on
    every heartbeat). Raises the driver's error when it has no `meta` (a schema before
    0003: see read_revision) or no schema at all."""
    from sqlalchemy import text

    row = conn.execute(text(READ_SQL.format(k=":k")), {"k": MIN_CODE_KEY}).first()
    return Schema(None) if row is None else Schema(row[0], row[1])


def read_revision(conn: Connection) -> Schema:
    """The revision alone, for a schema older than `meta`."""
    from sqlalchemy import text

    return Schema(conn.execute(text("SELECT version_num FROM alembic_version")).scalar())
