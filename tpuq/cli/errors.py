"""One error path: a mistake or a refusal prints one line and exits with its kind's status,
never a traceback.

Every tpuq error carries its kind (tpuq/errors.py); `EXIT` below is the one table from kind
to exit status (docs/reference.md "Exit statuses", checked by tests/unit/test_contract.py):
0 done; 1 tpuq or a service it needs is unavailable; 2 a usage mistake or a refused request;
3 no such job, host or member; 4 not yours to do; 5 the job is not in a state that allows it.
"""

from __future__ import annotations

import sys
from typing import IO, Any

import click

from tpuq.errors import Failure, TpuqError

EXIT: dict[Failure, int] = {
    Failure.REFUSED: 2, Failure.BAD_REQUEST: 2, Failure.NOT_FOUND: 3, Failure.FORBIDDEN: 4,
    Failure.CONFLICT: 5, Failure.UNAVAILABLE: 1, Failure.BUSY: 1,
    Failure.OTHER_DEPLOYMENT: 1, Failure.AGENT_ERROR: 1,
}


class UserError(TpuqError, click.ClickException):
    """A mistake the user can fix (or a refusal, by its kind); shown as
    `tpuq: error: <message>`, exiting with its kind's status."""

    KIND = Failure.REFUSED

    def __init__(self, message: str, kind: Failure | None = None) -> None:
        super().__init__(message, kind)
        # the exit status differs per instance; Click declares exit_code a class variable
        self.__dict__["exit_code"] = EXIT[self.kind]

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"tpuq: error: {self.format_message()}", file=file, err=True)


class Unavailable(UserError):
    """A service tpuq needs is down or misconfigured."""

    KIND = Failure.UNAVAILABLE


class Refused(UserError):
    """A request tpuq did not carry out; its kind decides the exit status."""

    def __init__(self, kind: Failure, message: str) -> None:
        super().__init__(message, kind)


def translate(e: BaseException) -> UserError | None:
    """Errors from the library, as one line for people with their kind's status; None for
    what is no known error (a bug: its traceback is shown)."""
    if isinstance(e, UserError):
        return e
    if isinstance(e, TpuqError):
        return Refused(e.kind, str(e))
    # SQLAlchemy's errors: only possible once it is loaded (this module never loads it)
    sqlalchemy_errors = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy_errors is not None and isinstance(e, sqlalchemy_errors.DBAPIError):
        from tpuq.state.outage import describe

        return Unavailable(describe(e))
    if isinstance(e, ConnectionError):
        return Unavailable(f"cannot reach a service: {e}")
    return None
