"""What a client may ask of tpuq, and what it answers: typed requests and replies.

Every command is one request and one reply. On a host they travel over the agent's
Unix socket (one JSON object each way per connection: `{"op": <name>, <fields>...}`,
then `{"reply": <name>, <fields>...}`); elsewhere the client hands the same request to
the same handlers in its own process (tpuq/client.py, tpuq/api/). Every message is a
class below; the decoders check every field's type, so what reaches a
handler is well-formed (what it *means*, a job spec's ranges for example, is checked
further in, by the one spec validator).

Stdlib only and cheap to import: a command through the socket loads this and not
SQLAlchemy. The message classes are records (tpuq/records.py) rather than
dataclasses (which generate code at import: 25 frozen dataclasses cost 18 ms of every
command), and the type checks are written here rather than with a validation library
(msgspec alone costs ~22 ms of import, a third of a submit).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from enum import Enum

from tpuq.errors import Failure as Failure  # the wire carries it: clients read it here too
from tpuq.errors import TpuqError
from tpuq.records import MISSING, Record

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeVar

    R = TypeVar("R", "Request", "Reply")
if TYPE_CHECKING:
    from typing import dataclass_transform  # novm: type checkers only
else:
    def dataclass_transform(**_: Any) -> Callable[[type], type]:
        return lambda cls: cls

MAX_MESSAGE = 1024 * 1024  # bytes of one request, or of one frame of a reply (framing.py)
MAX_DEPTH = 32  # nesting of JSON containers in a request
# items in one list of a request (ids to cancel, --after ids): more is refused before any
# handler runs, so no statement is ever built with more parameters than a database takes
MAX_IDS = 10_000
MAX_TASKS = 100_000  # tasks of one array (`--array`)

# The socket's language has a number, carried as "v" by every request and reply. An agent
# serves requests of OLDEST..PROTOCOL and refuses others in one line that names both
# numbers; a client that cannot read a reply of another number says it was carried out.
# 1 is the language from before the number was exchanged (no "v"): such an agent refuses
# any request that has one, and such a client any reply that has one, so both hear it
# without "v". Raise PROTOCOL when a message changes shape; while OLDEST < PROTOCOL, an
# agent's replies must stay readable by OLDEST's clients (docs/upgrading.md).
# 3: the job object's times are ISO 8601 and its durations written as options take them
# (`grace`, `time_limit`), its name and whole-host chips filled (tpuq/jobjson.py)
PROTOCOL = 3
OLDEST = 3
UNVERSIONED = 1


class ProtocolError(TpuqError, ValueError):
    """Bytes that are not a well-formed message; the text says what is wrong."""

    KIND = Failure.BAD_REQUEST


class SkewError(ProtocolError):
    """A message of a protocol this side does not speak; `version` is the other side's."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version




@dataclass_transform(kw_only_default=True)
class Message(Record):
    """Fields are the annotated class attributes (their values the defaults, None where
    none is written; tpuq/records.py). Keyword arguments only."""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._fields = tuple((name, kind, None if default is MISSING else default)
                            for name, kind, default in cls._fields)

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)


# ---- requests ------------------------------------------------------------------------------
class Request(Message):
    OP: ClassVar[str] = ""
    MUTATES: ClassVar[bool] = False  # changes the queue: agents are woken afterwards
    # a list field's most items, where it is not MAX_IDS
    LIMITS: ClassVar[dict[str, int]] = {}
    # how long a client waits for the answer (a listing of 100,000 jobs takes a while)
    PATIENCE_S: ClassVar[float] = 30.0
    # which queue the client means (Settings.deployment); None: whatever the agent serves
    deployment: str | None = None
    # whom a privileged caller (root, the agent's user, the database's owner) acts for;
    # anyone else always acts as who the kernel or the database says they are
    as_user: str | None = None


class Ping(Request):
    """Is an agent there, and which deployment does it serve?"""

    OP: ClassVar[str] = "ping"


class Wake(Request):
    """The queue changed: schedule now and check stop requests (every agent, in a team)."""

    OP: ClassVar[str] = "wake"


class WhoAmI(Request):
    """Who the caller is to tpuq, and whether an admin."""

    OP: ClassVar[str] = "whoami"


class Submit(Request):
    """Queue a job. `spec` is JobSpec.to_dict(); the one validator checks it (spec.py)."""

    OP: ClassVar[str] = "submit"
    MUTATES: ClassVar[bool] = True
    LIMITS: ClassVar[dict[str, int]] = {"array": MAX_TASKS, "array_args": MAX_TASKS}
    spec: dict[str, Any] = {}
    held: bool = False
    after: list[int] = []  # start only once these succeeded (an array's id: every task)
    after_any: list[int] = []  # start only once these ended, however
    # tasks of arrays by [array id, index] (`--after 54_2`): that one task
    after_tasks: list[list[int]] = []
    after_any_tasks: list[list[int]] = []
    array: list[int] = []  # an array: one task per index (TPUQ_ARRAY_INDEX), one transaction
    array_args: list[list[str]] = []  # --args-file: each task's extra arguments, by index
    throttle: int | None = None  # at most this many tasks of the array run at once
    # a function job (tpuq.client.submit(fn)): its cloudpickled (fn, args, kwargs), base64
    function: str = ""


class SubmitMany(Request):
    """Queue many jobs in one transaction (`tpuq.client.submit_many`). Each of `jobs` is
    {"spec": its fields, "held", "after", "after_any", "function"} as in Submit; `common`
    holds the spec fields every job shares, sent once. Submitted.tasks: their ids."""

    OP: ClassVar[str] = "submit_many"
    MUTATES: ClassVar[bool] = True
    common: dict[str, Any] = {}
    jobs: list[dict[str, Any]] = []


class ListJobs(Request):
    """Jobs (open ones and the `recent` newest ended, or all) and hosts, for `status`."""

    OP: ClassVar[str] = "list"
    PATIENCE_S: ClassVar[float] = 120.0
    owner: str | None = None
    team: str | None = None
    states: list[str] = []
    recent: int = 20
    everything: bool = False
    # each queued job's expected start from the scheduler's plan run forward
    # (`status --start`): costs a forecast, so only when asked
    starts: bool = False
    # the waiting tasks of an array as one job object, its `tasks` their indices (the
    # table of `status`): 10,000 tasks cost one object, not 10,000
    collapse: bool = False


class ShowJob(Request):
    OP: ClassVar[str] = "show"
    id: int = 0


class ReadLog(Request):
    """Output of a job's attempts from `positions` on (attempt number -> where the client
    is: opaque, from an earlier LogChunk); at most about `max_bytes` per reply."""

    OP: ClassVar[str] = "logs"
    id: int = 0
    attempt: int | None = None
    positions: dict[str, str] = {}
    max_bytes: int = 512 * 1024
    worker: int | None = None  # a slice job's worker (None: worker 0; -1: every worker)


class Action(str, Enum):
    CANCEL = "cancel"
    PREEMPT = "preempt"
    HOLD = "hold"
    RELEASE = "release"

    def __str__(self) -> str:
        return self.value


class Control(Request):
    """Cancel, preempt, hold or release jobs (their owners' or, for admins, anyone's)."""

    OP: ClassVar[str] = "control"
    MUTATES: ClassVar[bool] = True
    action: Action = Action.CANCEL
    ids: list[int] = []
    arrays: list[int] = []  # and every task of these arrays that has not ended


class Resubmit(Request):
    """New jobs from earlier ones, owned by the caller. `env` is what the caller's shell
    gives a job (jobenv.capture): another owner's captured values are never copied."""

    OP: ClassVar[str] = "resubmit"
    MUTATES: ClassVar[bool] = True
    ids: list[int] = []
    failed_since: float | None = None  # also every failed job that ended after this
    failed: bool = False
    dry_run: bool = False
    env: dict[str, str] = {}
    # whom the new jobs tell (the caller's own defaults): another owner's destinations
    # are never copied, nor readable
    notify: str | None = None
    notify_to: str | None = None


class Drain(Request):
    """Stop giving work to a host and preempt its jobs, or let it take work (admins)."""

    OP: ClassVar[str] = "drain"
    MUTATES: ClassVar[bool] = True
    host: str = ""
    draining: bool = True


class ForgetHost(Request):
    """Remove the row of a host that is gone (admins); refused while its agent lives."""

    OP: ClassVar[str] = "forget-host"
    MUTATES: ClassVar[bool] = True
    host: str = ""


class Update(Request):
    """Change a queued or held job's priority, time limit or --begin time (its owner, or
    an admin)."""

    OP: ClassVar[str] = "update"
    MUTATES: ClassVar[bool] = True
    id: int = 0
    priority: int | None = None
    time_limit_s: float | None = None
    begin_at: float | None = None  # not started before this (epoch s); a past time: now


class History(Request):
    """Ended jobs over a period, with runtime and chip-hours (`tpuq history`)."""

    OP: ClassVar[str] = "history"
    PATIENCE_S: ClassVar[float] = 120.0
    since: float | None = None
    until: float | None = None
    user: str | None = None
    team: str | None = None
    states: list[str] = []
    match: str | None = None  # only jobs whose name or command holds this text
    newest: int | None = None  # a page: the newest this many (None: every one)...
    skip: int = 0  # ...after the `skip` newest


class QuotaReport(Request):
    OP: ClassVar[str] = "quota"


class QuotaSet(Request):
    """Change a team's share and limits; only the fields given (admins)."""

    OP: ClassVar[str] = "quota-set"
    MUTATES: ClassVar[bool] = True
    team: str = ""
    values: dict[str, Any] = {}


class Membership(Request):
    """Add a user to a team, or remove them (admins)."""

    OP: ClassVar[str] = "member"
    MUTATES: ClassVar[bool] = True
    team: str = ""
    user: str = ""
    member: bool = True


class AdminSet(Request):
    """Make a user an admin of this deployment, or not (admins)."""

    OP: ClassVar[str] = "admin"
    user: str = ""
    admin: bool = True


class CleanTpu(Request):
    """Free this host's TPU (admins; `tpuq pod clean`): kill tpuq's orphans, name every
    other holder, remove a stale libtpu lock once nobody holds the devices. Concerns the
    agent's own host, whatever deployment it serves."""

    OP: ClassVar[str] = "clean-tpu"


class ReadResult(Request):
    """A function job's pickled outcome, from `offset` on, a bounded chunk per request
    (its owner's and the admins' only)."""

    OP: ClassVar[str] = "result"
    id: int = 0
    offset: int = 0


class FleetReport(Request):
    """The fleet's slots, each VM's state and its costs since `since` (`tpuq fleet
    status`, `tpuq usage`)."""

    OP: ClassVar[str] = "fleet"
    since: float | None = None
    until: float | None = None


class AttachTerminal(Request):
    """The terminal of session `id` (`tpuq run`): the slave end of the caller's
    pseudo-terminal travels with this request as SCM_RIGHTS, so only the host's agent
    serves it, and only for the session's owner."""

    OP: ClassVar[str] = "attach"
    id: int = 0


REQUESTS: dict[str, type[Request]] = {cls.OP: cls for cls in (
    Ping, Wake, WhoAmI, Submit, SubmitMany, ListJobs, ShowJob, ReadLog, Control, Resubmit, Drain,
    ForgetHost, History, Update, QuotaReport, QuotaSet, Membership, AdminSet, CleanTpu,
    ReadResult, FleetReport, AttachTerminal)}


# ---- replies ---------------------------------------------------------------------------------
class Reply(Message):
    NAME: ClassVar[str] = ""


class Pong(Reply):
    NAME: ClassVar[str] = "pong"
    pid: int = 0
    host: str = ""
    deployment: str = ""


class Done(Reply):
    """The request was carried out; `message` says what happened, for people."""

    NAME: ClassVar[str] = "done"
    message: str = ""


class Identity(Reply):
    NAME: ClassVar[str] = "identity"
    user: str = ""
    admin: bool = False


class Submitted(Reply):
    NAME: ClassVar[str] = "submitted"
    id: int = 0
    tasks: list[int] = []  # an array's task ids, in index order (id is the first)
    warnings: list[str] = []  # accepted, but it may wait long (no host of its type yet)


class JobList(Reply):
    """Job objects (the JSON contract, README), host objects, the database clock."""

    NAME: ClassVar[str] = "jobs"
    jobs: list[dict[str, Any]] = []
    hosts: list[dict[str, Any]] = []
    now: float = 0.0
    # what the fleet's VMs wait for, one line each (empty without a fleet)
    fleet: list[str] = []


class JobDetail(Reply):
    NAME: ClassVar[str] = "job"
    job: dict[str, Any] = {}


class LogChunk(Reply):
    """`pieces`: {"attempt", "host", "data" (base64)} in order; `notes`: what the client
    should say (output no longer kept, and where the whole log is); `positions`: where
    to go on from; `ended`: the job is over and everything of it was sent."""

    NAME: ClassVar[str] = "log"
    state: str = ""
    attempts: list[int] = []
    pieces: list[dict[str, Any]] = []
    notes: list[str] = []
    positions: dict[str, str] = {}
    ended: bool = False
    reason: str = ""  # the job's, for one that never started
    outcomes: dict[str, str] = {}  # attempt -> "failed: could not start: ..." once ended


class Results(Reply):
    """One result per job (or item) a request touched: {"id", "ok", "message"}."""

    NAME: ClassVar[str] = "results"
    results: list[dict[str, Any]] = []


class Rows(Reply):
    """Plain rows of a report (e.g. `tpuq quota`)."""

    NAME: ClassVar[str] = "rows"
    rows: list[dict[str, Any]] = []


class TpuCleaned(Reply):
    """What a CleanTpu found and did: the fields of agent/tpu/cleanup.py's CleanReport."""

    NAME: ClassVar[str] = "tpu-cleaned"
    report: dict[str, Any] = {}


class ResultChunk(Reply):
    """`data` (base64): bytes of the outcome from the offset asked; `size`: all of it
    (-1: no attempt has stored one yet); `state`: the job's; `owner`: whose job it is;
    `yours`: whether the caller is that owner by its own account (not by a name it acts
    under), the only caller who may unpickle it (client.Job.result)."""

    NAME: ClassVar[str] = "result"
    state: str = ""
    size: int = -1
    data: str = ""
    owner: str = ""
    yours: bool = False


class Refusal(Reply):
    NAME: ClassVar[str] = "refusal"
    kind: Failure = Failure.REFUSED
    error: str = ""


class FleetView(Reply):
    """tpuq/fleet/report.py's view (`slots`, `members`, `controller`, `now`) and the
    chip-hours of tpuq/fleet/costs.py (`costs`)."""

    NAME: ClassVar[str] = "fleet"
    view: dict[str, Any] = {}
    costs: list[dict[str, Any]] = []


REPLIES: dict[str, type[Reply]] = {cls.NAME: cls for cls in (
    Pong, Done, Identity, Submitted, JobList, JobDetail, LogChunk, Results, Rows, TpuCleaned,
    ResultChunk, Refusal, FleetView)}


# ---- encoding ---------------------------------------------------------------------------------
def encode(msg: Request | Reply, version: int = PROTOCOL) -> bytes:
    """`version`: the language of the side that reads it (UNVERSIONED: no "v")."""
    body = {name: _plain(value) for name, value in msg.as_dict().items()}
    tag: dict[str, Any] = {"op": msg.OP} if isinstance(msg, Request) else {"reply": msg.NAME}
    if version != UNVERSIONED:
        tag["v"] = version
    return json.dumps({**tag, **body}, allow_nan=False, default=str).encode()


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def decode_request(raw: bytes) -> Request:
    """SkewError for a client whose language this agent does not serve."""
    data = parse(raw)
    version = _version(data)
    if not OLDEST <= version <= PROTOCOL:
        newer = version > PROTOCOL
        raise SkewError(
            f"this tpuq speaks socket protocol {version}, this host's agent "
            f"{OLDEST}..{PROTOCOL}: nothing was done; "
            + ("upgrade the agent (docs/upgrading.md), or use a tpuq as old as it"
               if newer else
               "upgrade tpuq where you ran it to the agent's version (docs/upgrading.md)"),
            version)
    op = data.pop("op", None)
    cls = REQUESTS.get(op) if isinstance(op, str) else None
    if cls is None:
        raise ProtocolError(f"unknown request {_short(op)}")
    req = _build(cls, data)
    check_limits(req)
    return req


def check_limits(req: Request) -> None:
    """ProtocolError, naming the limit, for a list with more items than a request may
    carry (the agent checks what it decodes; the client what it would send or run)."""
    for name, _, _ in req._fields:
        value = getattr(req, name)
        most = req.LIMITS.get(name, MAX_IDS)
        if isinstance(value, (list, dict)) and len(value) > most:
            raise ProtocolError(f"{req.OP}.{name} has {len(value)} items: a request carries "
                                f"at most {most}")


def check_size(req: Request) -> bytes:
    """The request's bytes; ProtocolError, naming the limit, when it is too big to send."""
    raw = encode(req)
    if len(raw) > MAX_MESSAGE:
        raise ProtocolError(f"the request is {len(raw)} bytes: a request is at most "
                            f"{MAX_MESSAGE} bytes (fewer ids, a smaller spec)")
    return raw


def decode_reply(raw: bytes) -> Reply:
    """SkewError for an agent of another language: one from before the number was
    exchanged (it refused the request unread), or one whose reply this cannot read."""
    return reply_from(parse(raw, nesting=False))


def reply_from(data: dict[str, Any]) -> Reply:
    """The reply a parsed JSON object is (ProtocolError if none; SkewError as above)."""
    version = _version(data)
    if version == UNVERSIONED:
        raise SkewError(f"this host's agent is older than this tpuq (socket protocol "
                        f"{UNVERSIONED}, this tpuq {PROTOCOL}) and refused the request "
                        "unread: nothing was done; upgrade the agent (docs/upgrading.md), "
                        "or use the agent's own tpuq", version)
    name = data.pop("reply", None)
    cls = REPLIES.get(name) if isinstance(name, str) else None
    try:
        if cls is None:
            raise ProtocolError(f"unknown reply {_short(name)}")
        return _build(cls, data)
    except ProtocolError as e:
        if version == PROTOCOL:
            raise
        raise SkewError(f"this host's agent speaks socket protocol {version}, this tpuq "
                        f"{PROTOCOL}: it carried the request out, but its answer is not one "
                        f"this tpuq can read ({e}); see `tpuq status --mine`, and use a tpuq "
                        "of the agent's version (docs/upgrading.md)", version) from None


def _version(data: dict[str, Any]) -> int:
    version = data.pop("v", UNVERSIONED)
    if not is_int(version) or version < UNVERSIONED:
        raise ProtocolError(f"v: not a protocol number: {_short(version)}")
    return int(version)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"{name} is not a number JSON allows")


def parse(raw: bytes, nesting: bool = True) -> dict[str, Any]:
    """One message's JSON object. `nesting`: refuse deep nesting before parsing (a
    request, from anyone; a byte-by-byte scan that a reply from the agent is spared)."""
    if len(raw) > MAX_MESSAGE:
        raise ProtocolError(f"message over {MAX_MESSAGE} bytes")
    if nesting and _depth(raw) > MAX_DEPTH:
        raise ProtocolError(f"nested deeper than {MAX_DEPTH}")
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise ProtocolError("nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"not JSON: {_short(str(e))}") from None
    if not isinstance(data, dict):
        raise ProtocolError("a message is a JSON object")
    return data


def _depth(raw: bytes) -> int:
    """Deepest nesting of brackets outside strings (a cheap pre-check, before parsing)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                return deepest
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest




def _build(cls: type[R], data: dict[str, Any]) -> R:
    fields = {name: kind for name, kind, _ in cls._fields}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        shown = ", ".join(_short(u) for u in unknown[:5])
        raise ProtocolError(f"{_name(cls)}: unknown fields {shown}")
    values = {}
    for name, value in data.items():
        values[name] = checked(value, fields[name], f"{_name(cls)}.{name}")
    return cls(**values)


def _name(cls: type[Request] | type[Reply]) -> str:
    return cls.OP if issubclass(cls, Request) else cls.NAME


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# an integer on the wire fits the database's 64-bit integers: a larger one would fail in
# the database driver (SQLite's OverflowError), deep in a handler, not as a refusal
WIRE_INT = (-(2 ** 63), 2 ** 63 - 1)


def _wire_int(v: Any) -> bool:
    return is_int(v) and WIRE_INT[0] <= v <= WIRE_INT[1]


def _is_number(v: Any) -> bool:
    return _wire_int(v) or (isinstance(v, float) and math.isfinite(v))


def _one_of(enum: type[Enum]) -> Callable[[Any], bool]:
    values = frozenset(e.value for e in enum)
    return lambda v: isinstance(v, str) and v in values  # a dict or list is no member


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


def _dict_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and all(check(x) for x in v.values())


def _any(v: Any) -> bool:
    return True


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "int": _wire_int,
    "float": _is_number,
    "dict[str, Any]": _dict_of(_any),
    "dict[str, str]": _dict_of(lambda v: isinstance(v, str)),
    "list[int]": _list_of(_wire_int),
    "list[str]": _list_of(lambda v: isinstance(v, str)),
    "list[list[str]]": _list_of(_list_of(lambda v: isinstance(v, str))),
    "list[list[int]]": _list_of(_list_of(_wire_int)),
    "list[dict[str, Any]]": _list_of(lambda v: isinstance(v, dict)),
    "Failure": _one_of(Failure),
    "Action": _one_of(Action),
}
_ENUMS: dict[str, type[Enum]] = {"Failure": Failure, "Action": Action}


def _too_large(v: Any) -> bool:
    if isinstance(v, list):
        return any(_too_large(x) for x in v)
    return is_int(v) and not _wire_int(v)


def checked(value: Any, kind: str, where: str) -> Any:
    """`value` if it has the type the annotation `kind` names (the few forms used above)."""
    options = [k.strip() for k in kind.split("|")]
    if "None" in options:
        if value is None:
            return None
        options.remove("None")
    (kind,) = options
    if not _CHECKS[kind](value):
        if _too_large(value):
            raise ProtocolError(f"{where} holds an integer out of range (64-bit)")
        raise ProtocolError(f"{where} must be {kind}, not {type(value).__name__}")
    enum = _ENUMS.get(kind)
    return enum(value) if enum is not None else value
