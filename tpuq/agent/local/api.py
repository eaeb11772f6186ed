"""What the agent does for a caller on its own VM (requests: tpuq/protocol.py).

The socket server (local/server.py) hands each decoded request here with the caller's uid
from SO_PEERCRED: the kernel, not the request, says who asks. Root and the agent's own
user are admins here and may act for someone else (`as_user`, e.g. TPUQ_USER); everyone
else is who the kernel says, an admin only if the deployment's `admins` table says so.
The requests themselves are answered by the same handlers as everywhere (tpuq/api/).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from tpuq.agent.local.terminals import Refused, Terminals, check_terminal
from tpuq.api.caller import Caller
from tpuq.api.handlers import Api, Reasons
from tpuq.protocol import (
    AttachTerminal,
    CleanTpu,
    Done,
    Failure,
    Ping,
    Pong,
    Refusal,
    Reply,
    Request,
    Submit,
    SubmitMany,
    TpuCleaned,
    Wake,
)
from tpuq.settings import Settings
from tpuq.state import admins, queries
from tpuq.state.db import Database
from tpuq.users import name_of

log = logging.getLogger("tpuq.agent")
OPEN = ("queued", "held", "assigned", "running")  # a session that may still start


class LocalApi:
    """`on_submit` wakes the scheduler for a new job; `on_change` tells every agent the
    queue changed (a cancel, a hold, a drain...); `free_tpu` frees this host's TPU."""

    def __init__(self, settings: Settings, db: Database, *, on_submit: Callable[[], None],
                 on_change: Callable[[], None], reasons: Reasons | None = None,
                 free_tpu: Callable[[], dict[str, Any]] | None = None,
                 terminals: Terminals | None = None) -> None:
        self.settings = settings
        self.db = db
        self.on_submit = on_submit
        self.on_change = on_change
        self.free_tpu = free_tpu
        self.api = Api(settings, db, here=settings.host, reasons=reasons)
        self.terminals = terminals or Terminals()  # sessions' terminals, for their start

    def handle(self, req: Request, uid: int) -> Reply:
        if isinstance(req, Ping):
            return Pong(pid=os.getpid(), host=self.settings.host,
                        deployment=self.settings.deployment)
        if isinstance(req, CleanTpu):
            return self._clean(uid)
        if req.deployment not in (None, self.settings.deployment):
            return Refusal(kind=Failure.OTHER_DEPLOYMENT,
                           error=f"this agent serves {self.settings.deployment}")
        if isinstance(req, Wake):
            self.on_change()
            return Done()
        reply = self.api.handle(req, self.caller(uid, req.as_user))
        if req.MUTATES and not isinstance(reply, Refusal):
            # a new job only concerns the scheduler; anything else may concern any host
            self.on_submit() if isinstance(req, (Submit, SubmitMany)) else self.on_change()
        return reply

    def attach(self, req: Request, uid: int, fds: list[int]) -> Reply:
        """A session's terminal (the slave end of its caller's pty, `fds`), kept for its
        start here. Only the session's owner hands it over: whoever holds a session's
        terminal types into it. Every fd received is kept or closed here."""
        try:
            if not isinstance(req, AttachTerminal) or len(fds) != 1:
                raise Refused("attach takes one terminal, passed with the request")
            check_terminal(fds[0])
            self._may_attach(req, uid)
        except Refused as e:
            for fd in fds:
                os.close(fd)
            return Refusal(kind=Failure.REFUSED, error=str(e))
        try:
            self.terminals.offer(req.id, fds[0], uid)
        except Refused as e:
            return Refusal(kind=Failure.REFUSED, error=str(e))
        return Done()

    def _may_attach(self, req: AttachTerminal, uid: int) -> None:
        if req.deployment not in (None, self.settings.deployment):
            raise Refused(f"this agent serves {self.settings.deployment}")
        caller = self.caller(uid, req.as_user)
        with self.db.read() as s:
            row = queries.job(s, req.id)
            kept = {j: queries.job(s, j) for j in self.terminals.waiting()}
        for job_id, other in kept.items():  # ended, or started elsewhere: not ours to keep
            if other is None or other.state not in OPEN or (
                    other.host not in (None, self.settings.host)):
                self.terminals.drop(job_id)
        if row is None or not (caller.name == row.owner):
            raise Refused(f"no session {req.id} of yours")
        if not row.session:
            raise Refused(f"job {req.id} is not a session (`tpuq run`)")
        if row.state not in OPEN:
            raise Refused(f"session {req.id} is {row.state}")
        if row.host not in (None, self.settings.host):
            raise Refused(f"session {req.id} runs on {row.host}, not here")

    def _clean(self, uid: int) -> Reply:
        """The host's own TPU, whichever deployment asks: admins only (it kills)."""
        if self.free_tpu is None:
            return Refusal(kind=Failure.BAD_REQUEST, error="clean-tpu is not served here")
        if not self.caller(uid, None).admin:
            return Refusal(kind=Failure.FORBIDDEN, error="only an admin frees a host's TPU "
                           "(root, the agent's user, or `tpuq admin add`)")
        return TpuCleaned(report=self.free_tpu())

    def caller(self, uid: int, as_user: str | None) -> Caller:
        name = name_of(uid)
        if uid in (0, os.getuid()):
            return Caller(name=as_user or name, admin=True, account=name)
        with self.db.read() as s:
            return Caller(name=name, admin=admins.is_admin(s, name))
