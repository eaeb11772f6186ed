"""Every error tpuq raises, and what kind of failure it is: one root, one set of kinds.

Each project exception derives from `TpuqError` and carries a `Failure` kind. The kind
decides how a caller reacts: the agent answers a request with a Refusal of that kind, the
CLI exits with that kind's status (the one table, tpuq/cli/errors.py `EXIT`; the reference's
exit-status table), nobody matches errors by class name.

Stdlib only: the socket client and the CLI import it before anything heavy.
"""

from __future__ import annotations

from enum import Enum

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import ClassVar


class Failure(str, Enum):
    """Why a request was not carried out. Each kind is one way for the client to react
    (and one exit status of the CLI: the reference's "Exit statuses")."""

    BAD_REQUEST = "bad_request"  # not a well-formed request (a bug or a hostile client)
    REFUSED = "refused"  # well-formed but not acceptable (a bad spec): the user's to fix
    NOT_FOUND = "not_found"  # no such job, host, team member
    FORBIDDEN = "forbidden"  # not the caller's to do
    CONFLICT = "conflict"  # the thing is not in a state that allows it
    UNAVAILABLE = "unavailable"  # the agent cannot reach what it needs (the database)
    BUSY = "busy"  # too many requests from this caller at once: try again
    OTHER_DEPLOYMENT = "other_deployment"  # this agent serves another queue: go elsewhere
    AGENT_ERROR = "agent_error"  # a bug in the agent; its log has the traceback

    def __str__(self) -> str:
        return self.value


class TpuqError(Exception):
    """The root of tpuq's errors. `kind` (the class's `KIND` unless given) says what kind
    of failure it is; the message is one line, for people."""

    KIND: ClassVar[Failure] = Failure.REFUSED

    def __init__(self, message: str = "", kind: Failure | None = None) -> None:
        super().__init__(message)
        self.kind: Failure = kind if kind is not None else self.KIND
