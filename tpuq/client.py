"""Asking tpuq from Python or the CLI: one request (tpuq/protocol.py), one reply.

On a host the request goes to its agent's Unix socket: the agent knows the caller from
the kernel, and the caller needs no database credentials. Where no agent of this
deployment answers (a laptop, a login VM, a VM whose agent is stopped), the same
handlers (tpuq/api/) run in this process against the database, as whoever the database
says the caller is: a PostgreSQL login role, whose rows row-level security guards, or
the owner of the embedded database file.

Import-light: through the socket nothing heavier than the protocol module is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

from tpuq import gcpause, localclient, protocol
from tpuq.errors import TpuqError
from tpuq.protocol import Failure, Refusal, Reply, Request
from tpuq.state.states import TERMINAL, JobState

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import Any, TypeVar

    from tpuq.api.caller import Caller
    from tpuq.batch import Pending, call, command
    from tpuq.jobjson import ShownJob
    from tpuq.settings import Settings
    from tpuq.state.db import Database
    from tpuq.state.pgsubmit import Submitter

    R = TypeVar("R", bound=Reply)


class ClientError(TpuqError):
    """A request that was not carried out, with how (`kind`) and why, in one line."""

    def __init__(self, kind: Failure, message: str) -> None:
        super().__init__(message, kind)
        self.message = message


class Client:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.via_agent: bool | None = None  # how the last request went (None: not yet)
        self._db: Database | None = None
        self._submitter: Submitter | None = None

    def call(self, req: Request) -> Reply:
        """The reply, a Refusal included (see `ask` for one that raises)."""
        cfg = self.settings
        req = req.replace(deployment=cfg.socket_deployment, as_user=cfg.user or None)
        try:  # the agent refuses these too; checked here for the direct path as well
            protocol.check_limits(req)
        except protocol.ProtocolError as e:
            return Refusal(kind=Failure.REFUSED, error=str(e))
        try:
            reply = localclient.call(cfg.socket_path, req)
        except localclient.AgentUnavailable:
            pass  # nothing was carried out: ask the database directly
        except localclient.AgentSkew as e:  # its message says what was done
            raise ClientError(Failure.UNAVAILABLE, str(e)) from None
        except localclient.AgentNoAnswer as e:
            raise ClientError(Failure.UNAVAILABLE, f"{e}: it may or may not have been "
                              "carried out (see `tpuq status --mine`)") from None
        else:
            self.via_agent = True
            return reply
        if cfg.socket_deployment is None:
            # a login shell that names the host's agent but no database: that agent's queue
            # is meant, never a private one nobody serves
            from tpuq import announce

            raise ClientError(Failure.UNAVAILABLE, announce.hint(cfg) or (
                f"no agent answers at {cfg.socket_path} (TPUQ_AGENT_SOCKET): is this host's "
                "agent running? (`systemctl status tpuq-agent`)"))
        self.via_agent = False
        return self._direct(req)

    def ask(self, req: Request, expect: type[R]) -> R:
        """The reply of the kind expected; ClientError for a refusal."""
        reply = self.call(req)
        if isinstance(reply, Refusal):
            raise ClientError(reply.kind, reply.error)
        if not isinstance(reply, expect):
            raise ClientError(Failure.AGENT_ERROR, f"unexpected reply {reply.NAME!r} to "
                                                   f"{req.OP!r}")
        return reply

    def close(self) -> None:
        if self._db is not None:
            self._db.dispose()
        if self._submitter is not None:
            self._submitter.close()

    # ---- without an agent: the handlers, here -------------------------------------------------
    def _direct(self, req: Request) -> Reply:
        if isinstance(req, protocol.Ping):
            return Refusal(kind=Failure.UNAVAILABLE, error="no agent answers here")
        if isinstance(req, protocol.Submit) and self._db is None:
            # a plain team submit without SQLAlchemy; the handlers take what it declines
            if self._submitter is None:
                from tpuq.state.pgsubmit import Submitter

                self._submitter = Submitter(self.settings)
            reply = self._submitter.submit(req)
            if reply is not None:
                return reply
        with _ctrl_c_between():
            with gcpause.paused():  # SQLAlchemy, the state layer and the handlers load here
                from tpuq.api.handlers import Api

                try:
                    db = self._database()
                except Exception as e:
                    self._not_ours(e)
                    raise
            reply = Api(self.settings, db, here=self.settings.host).handle(
                req, self._caller(db))
        if req.MUTATES and not isinstance(reply, Refusal):
            self._wake_agents()
        return reply

    def _not_ours(self, e: Exception) -> None:
        """An embedded database this user may not open: it is a shared host's, whose
        agent answers for everyone (and is not answering)."""
        cfg = self.settings
        path = cfg.db_url.split("sqlite:///", 1)[-1] if cfg.db_url.startswith("sqlite") else ""
        if path and os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
            raise ClientError(Failure.UNAVAILABLE, f"no agent answers at {cfg.socket_path}, "
                              f"and its database ({path}) is the agent's alone: is the agent "
                              "running? (`tpuq agent`, or ask whoever runs it)") from None

    def _database(self) -> Database:
        if self._db is None:
            from tpuq.state.db import open_database

            self._db = open_database(self.settings, auto_upgrade=not self.settings.database_url)
        return self._db

    def _caller(self, db: Database) -> Caller:
        """Who the database says this is. The owner of an embedded database file (or a
        PostgreSQL role of the agents', or a superuser) may act for anyone (TPUQ_USER)."""
        from tpuq.api.caller import Caller
        from tpuq.state import admins

        with db.read() as s:
            who = admins.session_user(s)
            if who is None or who.privileged:
                from tpuq.users import name_of

                return Caller(name=self.settings.user_name, admin=True,
                              account=name_of(os.geteuid()))
            return Caller(name=who.name, admin=admins.is_admin(s, who.name))

    def _wake_agents(self) -> None:
        """Tell the scheduler and agents something changed; they poll if nobody hears.
        Through the database (a NOTIFY its agents listen for): a user needs no broker
        account that could publish into Celery's queues (state/wakeups.py)."""
        from tpuq.state import wakeups

        if self._db is not None:
            wakeups.ring(self._db)  # SQLite: no agent answered this VM's socket, none runs


# ---- the Python API: functions and jobs from a notebook or a sweep driver ----------------------
_SHARED: dict[Settings, Client] = {}


def shared_client(settings: Settings) -> Client:
    """One client per settings for this process's Python API calls: a sweep driver's
    thousand submits and a Job's polling reuse one database connection (without an
    agent) instead of opening the database for each."""
    client = _SHARED.get(settings)
    if client is None:
        if not _SHARED:
            import atexit

            atexit.register(_close_shared)
        client = _SHARED[settings] = Client(settings)
    return client


def _close_shared() -> None:
    for client in _SHARED.values():
        client.close()
    _SHARED.clear()


FIRST_POLL_S, MAX_POLL_S = 0.2, 2.0  # asking again: quickly at first, then every 2 s


def wait_ended(state_of: Callable[[int], str], ids: Sequence[int], *,
               timeout: float | None = None,
               on_end: Callable[[int, str], None] = lambda _id, _state: None
               ) -> dict[int, str]:
    """Each job's final state once all have ended, asking `state_of` with a growing
    pause (`tpuq wait`, `Job.wait`); TimeoutError after `timeout` seconds."""
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    ended: dict[int, str] = {}
    pause = FIRST_POLL_S
    while True:
        for job_id in ids:
            if job_id not in ended:
                state = state_of(job_id)
                if state in TERMINAL:
                    ended[job_id] = state
                    on_end(job_id, state)
        if len(ended) == len(ids):
            return ended
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            waiting = ", ".join(str(i) for i in ids if i not in ended)
            raise TimeoutError(f"job {waiting} still not ended after {timeout:g}s")
        time.sleep(pause if left is None else min(pause, left))
        pause = min(pause * 1.5, MAX_POLL_S)


class JobError(TpuqError):
    """A job that gave no value: it failed before its function returned or raised (it
    could not start, was cancelled, timed out), or its function's exception could not be
    pickled (the remote traceback is the message)."""

    KIND = Failure.CONFLICT

    def __init__(self, job_id: int, state: str, message: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.state = state


class Job:
    """A job by its id: its state, waiting for its end, its result (function jobs), its
    output, cancelling it. `tpuq.client.Job(12)` works for any job."""

    def __init__(self, job_id: int, settings: Settings | None = None,
                 warnings: list[str] | None = None) -> None:
        from tpuq.settings import load

        self.id = job_id
        self.settings = settings or load()
        self.warnings = warnings or []

    def __repr__(self) -> str:
        return f"tpuq.client.Job({self.id})"

    def _ask(self, req: Request, expect: type[R]) -> R:
        return shared_client(self.settings).ask(req, expect)

    def info(self) -> ShownJob:
        """The job object of `tpuq show --json` (the reference's JSON contract), as is:
        times are ISO 8601 strings in UTC (`datetime.fromisoformat` reads them, and
        `tpuq.jobjson.epoch` gives epoch seconds), durations as options take them."""
        from typing import cast

        from tpuq.protocol import JobDetail, ShowJob

        return cast("ShownJob", dict(self._ask(ShowJob(id=self.id), JobDetail).job))

    def state(self) -> str:
        return self.info()["state"]

    def done(self) -> bool:
        return self.state() in TERMINAL

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends; its final state. TimeoutError after `timeout` s."""
        return wait_ended(lambda _: self.state(), [self.id], timeout=timeout)[self.id]

    def result(self, timeout: float | None = None) -> Any:
        """The function's value once the job ended; its exception (with the remote
        traceback as a note) if it raised; JobError if it gave neither.

        Only the job's owner, by their own account, gets it: a pickle runs code of
        whoever wrote it when it is loaded, so another account (an admin, root acting as
        anyone) is refused with ClientError and may take the bytes, unopened, from
        `result_bytes()`.
        """
        import cloudpickle

        state = self.wait(timeout)
        data, owner, yours = self._read_result()
        if data is not None and not yours:
            raise ClientError(Failure.FORBIDDEN, (
                f"job {self.id} is {owner}'s: loading its result would run code its job "
                f"wrote, as you; only {owner} loads it (`Job({self.id}).result_bytes()` "
                "gives the pickled bytes, unopened)"))
        if data is None:
            info = self.info()
            raise JobError(self.id, state, f"job {self.id} {state} without a result: "
                                           f"{info.get('reason') or 'no reason recorded'}")
        kind, *rest = cloudpickle.loads(data)
        if kind == "ok" and state == JobState.SUCCEEDED:
            return rest[0]
        if kind == "ok":
            raise JobError(self.id, state, f"job {self.id} {state} after its function "
                                           "returned (see `tpuq show`)")
        exc, remote = rest
        if isinstance(exc, BaseException):
            note = f"remote traceback (job {self.id}):\n{remote}"
            if hasattr(exc, "add_note"):
                exc.add_note(note)
            else:  # Python 3.10
                exc.args = (*exc.args, note)
            raise exc
        raise JobError(self.id, state, f"job {self.id} raised:\n{remote}")

    def result_bytes(self, timeout: float | None = None) -> bytes | None:
        """The job's pickled outcome as stored, never unpickled (None when no attempt
        stored one): ("ok", value) or ("error", exception, traceback), cloudpickled.
        For an admin looking at another account's result: load it only in a process
        of that account's (`sudo -u OWNER`), never as yourself."""
        self.wait(timeout)
        return self._read_result()[0]

    def _read_result(self) -> tuple[bytes | None, str, bool]:
        """The stored outcome (None: none yet), whose job it is, and whether it is the
        caller's own (ResultChunk.yours)."""
        import base64

        from tpuq.protocol import ReadResult, ResultChunk

        out = b""
        while True:
            chunk = self._ask(ReadResult(id=self.id, offset=len(out)), ResultChunk)
            if chunk.size < 0:
                return None, chunk.owner, chunk.yours
            out += base64.b64decode(chunk.data)
            if len(out) >= chunk.size or not chunk.data:
                return out, chunk.owner, chunk.yours

    def cancel(self) -> None:
        from tpuq.protocol import Action, Control, Results

        (r,) = self._ask(Control(action=Action.CANCEL, ids=[self.id]), Results).results
        if not r.get("ok", True):
            raise ClientError(Failure(r.get("kind") or Failure.CONFLICT),
                              f"job {self.id} {r.get('message')}")

    def logs(self) -> str:
        """Its output so far (every attempt's, in order), as text."""
        import base64

        from tpuq.protocol import LogChunk, ReadLog

        positions: dict[str, str] = {}
        out = []
        while True:
            chunk = self._ask(ReadLog(id=self.id, positions=positions), LogChunk)
            positions = chunk.positions
            out += [base64.b64decode(p["data"]) for p in chunk.pieces]
            if not chunk.pieces:
                return b"".join(out).decode(errors="replace")


# ---- queuing from Python ---------------------------------------------------------------------
def submit(fn: Callable[..., Any], *args: Any, settings: Settings | None = None,
           **kwargs: Any) -> Job:
    """Queue `fn(*args, **kwargs)` as a job; its handle (`.result()`, `.wait()`, ...).

    The call is cloudpickled here (a notebook's functions and lambdas included), run on a
    host in a fresh interpreter (`python -m tpuq.runfn`, this interpreter's path by
    default) with this process's cwd and environment (as `tpuq submit --export ALL`), and
    its value or exception stored for `.result()` from any machine of the deployment.
    Options are the submit command's (`chips=`, `time_limit=`, `hold=`, `after=`...); a
    keyword argument of `fn` with an option's name goes through `functools.partial`.
    ClientError (its `kind` and one-line message) for anything refused, as the CLI's exit
    status says.
    """
    from tpuq.batch import call

    return submit_many([call(fn, *args, **kwargs)], settings=settings)[0]


def submit_command(argv: Sequence[str] | str, *, settings: Settings | None = None,
                   **options: Any) -> Job:
    """Queue a script or command as `tpuq submit` does, with its options as keywords:
    `submit_command(["train.py", "--lr", "3e-4"], chips=4, time_limit="12h")`. A string
    is split as a shell would (no expansion)."""
    from tpuq.batch import command

    return submit_many([command(argv, **options)], settings=settings)[0]


def submit_many(jobs: Iterable[Pending], *, settings: Settings | None = None,
                **options: Any) -> list[Job]:
    """Queue many jobs at once (a sweep): each a `call(fn, ...)` or `command(argv)`,
    with `options` for all of them (a job's own options win). All are checked before any
    is sent; each request is one transaction, so a refusal queues none of its jobs."""
    from tpuq import batch
    from tpuq.protocol import Submitted
    from tpuq.settings import load
    from tpuq.spec import SpecError

    cfg = settings or load()
    try:
        requests = batch.requests(jobs, cfg, options)
    except SpecError as e:
        raise ClientError(Failure.REFUSED, str(e)) from None
    client = shared_client(cfg)
    out: list[Job] = []
    for req in requests:
        done = client.ask(req, Submitted)
        out += [Job(i, cfg, warnings=list(done.warnings)) for i in done.tasks]
    if cfg.embedded and client.via_agent is False:
        _tell_of_other_agents(cfg)
    return out


def _tell_of_other_agents(cfg: Settings) -> None:
    """Queued into a database no agent serves while an agent of another TPUQ_HOME runs
    here: a Python warning (once per place), naming that TPUQ_HOME."""
    import warnings

    from tpuq import announce

    said = announce.hint(cfg)
    if said:
        warnings.warn(said, stacklevel=3)


# the items of a batch: loaded on first use, so that a CLI command stays import-light
_BATCH_NAMES = ("Pending", "call", "command")


def __getattr__(name: str) -> Any:
    if name in _BATCH_NAMES:
        from tpuq import batch

        return getattr(batch, name)
    raise AttributeError(f"module 'tpuq.client' has no attribute {name!r}")


__all__ = ["Client", "ClientError", "Job", "JobError", "Pending", "call", "command", "submit",
           "submit_command", "submit_many", "wait_ended"]


class _ctrl_c_between:  # noqa: N801 - a context manager used as a function
    """Ctrl-C during a request carried out here (its transaction, SQLAlchemy's bookkeeping)
    is raised once the request is done, not in the middle of it: an interrupted `tpuq
    wait` then says its one line, not SQLAlchemy's warning about a transaction left
    halfway. A second Ctrl-C is raised at once (a database that does not answer)."""

    def __enter__(self) -> None:
        import signal
        import threading

        self.pending = self.installed = False
        self.old: object = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._on)
            self.installed = True

    def _on(self, _sig: int, _frame: object) -> None:
        if self.pending:
            raise KeyboardInterrupt
        self.pending = True

    def __exit__(self, kind: object, _value: object, _tb: object) -> None:
        if not self.installed:
            return
        import signal

        signal.signal(signal.SIGINT, self.old if self.old is not None  # type: ignore[arg-type]
                      else signal.default_int_handler)
        if self.pending and kind is None:
            raise KeyboardInterrupt
