"""What an agent and a keeper say to each other, and the keeper's exit file: each message a
typed value, one encode and one decode for all of them.

A keeper outlives the agent that launched it, so an agent of a later release adopts
keepers of an earlier one: every message carries the version of this vocabulary it was
written in ("v"), and reading one is explicit about it. Version 0 is what keepers and
agents wrote before messages carried a version (no "v"): its fields may be missing (a
keeper older still wrote no "signalled"), and it is read with each such field unknown
(None). A version newer than this module's is refused (UnknownVersion): a reader skips it
rather than guess what it meant.

On the wire each message is one JSON line; agent -> keeper messages name their "op",
keeper -> agent ones their "event":
  agent -> keeper  Launch (the first line, to the keeper server), Lease, Stop, Kill,
                   Collected, Say (a line in a session's terminal)
  keeper -> agent  Started, Ended (also the exit file, `<log>.exit`), Status (on
                   connecting, to an adopting agent), Refused (a launch not taken)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from tpuq.errors import Failure, TpuqError

VERSION = 1
UNVERSIONED = 0  # messages written before they carried "v"


class MessageError(TpuqError, ValueError):
    """A line that is no message of this vocabulary (not JSON, no known op or event, a
    field of the wrong type)."""

    KIND = Failure.BAD_REQUEST


class UnknownVersion(MessageError):
    """A message of a later version than this module knows."""


@dataclass
class Launch:
    """What a keeper needs to start and keep one attempt (sent by the agent; the keeper
    moves its lease_until on with each Lease)."""

    OP: ClassVar[str] = "launch"
    job_id: int
    attempt: int
    host: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log_path: str
    exit_path: str
    run_dir: str
    lease_until: float  # clock(): the job is stopped before this unless renewed
    lease_s: float
    grace_s: float
    log_max_bytes: int
    umask: int = 0o022
    user: int | None = None
    group: int | None = None
    groups: list[int] = field(default_factory=list)
    chip_locks: list[str] = field(default_factory=list)  # flock'ed for the keeper's life
    instance: str = ""  # the database's (attempts/workdirs.py): an exit file names whose it is
    output: str | None = None  # --output: a file of the owner's the output also goes to
    tty: bool = False  # a session: its terminal comes with the launch (SCM_RIGHTS)

    @property
    def kill_margin_s(self) -> float:
        """SIGKILL comes this long before the lease could expire unrenewed."""
        return min(2.0, self.lease_s / 10)

    @property
    def stop_lead_s(self) -> float:
        """The stop signal comes this long before that SIGKILL: a chance to save."""
        return min(self.grace_s, self.lease_s / 6)


@dataclass(frozen=True)
class Lease:
    """The lease now runs until `until` (the keeper's clock(), taken before the renewal
    was sent)."""

    OP: ClassVar[str] = "lease"
    until: float


@dataclass(frozen=True)
class Stop:
    """Send the job `signal`, then SIGKILL after `grace` seconds (None: the launch's)."""

    OP: ClassVar[str] = "stop"
    signal: str = "SIGTERM"
    grace: float | None = None


@dataclass(frozen=True)
class Kill:
    """SIGKILL the job now."""

    OP: ClassVar[str] = "kill"


@dataclass(frozen=True)
class Collected:
    """The agent recorded the end: the keeper may go."""

    OP: ClassVar[str] = "collected"


@dataclass(frozen=True)
class Say:
    """A line from tpuq in a session's terminal."""

    OP: ClassVar[str] = "say"
    text: str


@dataclass(frozen=True)
class Started:
    """The job's process runs."""

    EVENT: ClassVar[str] = "started"
    pid: int
    keeper_pid: int
    start_ticks: int | None = None


@dataclass(frozen=True)
class Ended:
    """How the attempt ended, as its keeper saw it (also written to the exit file).

    `error`: it never ran (could not start, chips held: `host_error`, the host's fault);
    `fenced`: its keeper stopped it for an unrenewed lease; `signalled`: a signal of the
    keeper's reached it before it ended (None: a version 0 keeper did not say)."""

    EVENT: ClassVar[str] = "ended"
    code: int | None = None
    signal: int | None = None
    error: str | None = None
    host_error: bool = False
    fenced: bool = False
    signalled: bool | None = None
    dropped: int = 0
    keeper_pid: int | None = None
    ended_wall: float | None = None
    instance: str | None = None
    job_id: int | None = None
    attempt: int | None = None


@dataclass(frozen=True)
class Status:
    """What a keeper says to an agent that connects to it (to adopt it)."""

    EVENT: ClassVar[str] = "status"
    job_id: int
    attempt: int
    keeper_pid: int
    pid: int | None = None
    start_ticks: int | None = None
    ended: Ended | None = None


@dataclass(frozen=True)
class Refused:
    """The keeper server did not take a launch."""

    EVENT: ClassVar[str] = "error"
    message: str = "the keeper server refused the launch"


ToKeeper = Launch | Lease | Stop | Kill | Collected | Say
FromKeeper = Started | Ended | Status | Refused
Message = ToKeeper | FromKeeper

OPS: dict[str, type[ToKeeper]] = {c.OP: c for c in (Launch, Lease, Stop, Kill, Collected, Say)}
EVENTS: dict[str, type[FromKeeper]] = {c.EVENT: c for c in (Started, Ended, Status, Refused)}
KINDS: tuple[type[Message], ...] = (*OPS.values(), *EVENTS.values())

M = TypeVar("M", Launch, Lease, Stop, Kill, Collected, Say, Started, Ended, Status, Refused)


def as_dict(msg: Message) -> dict[str, Any]:
    """The message as JSON's object: its fields, what it is, and the version."""
    if isinstance(msg, (Launch, Lease, Stop, Kill, Collected, Say)):
        head = {"op": msg.OP}
    else:
        head = {"event": msg.EVENT}
    return {**head, "v": VERSION, **_fields_of(msg)}


_NAMES: dict[type, tuple[str, ...]] = {}  # each kind's field names, in order


def _fields_of(msg: Message) -> dict[str, Any]:
    """A message's fields by name, as they are: json.dumps walks the lists and dicts
    itself (dataclasses.asdict copied each of them first, a launch's environment
    included: six times the cost of the encoding). An Ended inside a Status is the
    one message within a message."""
    cls = type(msg)
    names = _NAMES.get(cls) or _NAMES.setdefault(cls, tuple(f.name for f in fields(cls)))
    return {name: _fields_of(v) if isinstance(v := getattr(msg, name), Ended) else v
            for name in names}


def encode(msg: Message) -> bytes:
    """One JSON line."""
    return json.dumps(as_dict(msg)).encode() + b"\n"


def decode(data: bytes | str | Mapping[str, Any], kind: type[M] | None = None) -> Message:
    """The message a line (or its parsed object) holds. `kind`: what it must be, for a
    record that does not name it (a version 0 exit file names no event)."""
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise MessageError(f"not JSON: {e}") from None
    if not isinstance(data, Mapping):
        raise MessageError("not a JSON object")
    version = data.get("v", UNVERSIONED)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise MessageError(f"version {version!r} is no version")
    if version > VERSION:
        raise UnknownVersion(f"a message of version {version}; this agent knows up to {VERSION}")
    cls = _kind_of(data, kind)
    return _build(cls, data)


def decode_as(kind: type[M], data: bytes | str | Mapping[str, Any]) -> M:
    """decode(), of a message that must be a `kind` (MessageError otherwise)."""
    msg = decode(data, kind)
    if not isinstance(msg, kind):
        raise MessageError(f"a {type(msg).__name__}, not a {kind.__name__}")
    return msg


def from_keeper(data: bytes | str | Mapping[str, Any]) -> FromKeeper:
    """decode(), of what a keeper says (an op there is a MessageError)."""
    msg = decode(data)
    if isinstance(msg, (Launch, Lease, Stop, Kill, Collected, Say)):
        raise MessageError(f"a keeper does not send {msg.OP!r}")
    return msg


def to_keeper(data: bytes | str | Mapping[str, Any]) -> ToKeeper:
    """decode(), of what an agent tells a keeper (an event there is a MessageError)."""
    msg = decode(data)
    if isinstance(msg, (Started, Ended, Status, Refused)):
        raise MessageError(f"an agent does not send {msg.EVENT!r}")
    return msg


def _kind_of(data: Mapping[str, Any], kind: type[Message] | None) -> type[Message]:
    if "op" in data:
        found: type[Message] | None = OPS.get(str(data["op"]))
    elif "event" in data:
        found = EVENTS.get(str(data["event"]))
    else:
        found = kind
    if found is None:
        raise MessageError(f"no known op or event in {sorted(data)}")
    return found


_NUMBER = (int, float)


def _build(cls: type[Message], data: Mapping[str, Any]) -> Message:
    """`cls` from `data`'s fields (a missing one takes its default: version 0 may lack
    it); a field of the wrong type is a MessageError."""
    kw: dict[str, Any] = {}
    for name, allowed, nullable, annotation in _schema(cls):
        if name not in data:
            continue  # a missing required field fails below, in the constructor
        value = data[name]
        if name == "ended" and cls is Status and value is not None:
            value = _build(Ended, value) if isinstance(value, Mapping) else value
        if not (value is None and nullable) and (
                not isinstance(value, allowed) or (isinstance(value, bool)
                                                   and bool not in allowed)):
            raise MessageError(f"{cls.__name__}.{name}: {value!r} is not {annotation}")
        kw[name] = value
    try:
        return cls(**kw)
    except TypeError as e:
        raise MessageError(f"{cls.__name__}: {e}") from None


# what each field's annotation admits; a field of a type not named here is refused on
# decoding (tests/unit/test_keeper_messages.py round-trips every kind, so it shows)
_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "float": _NUMBER, "str": (str,), "bool": (bool,),
    "list[str]": (list,), "list[int]": (list,), "dict[str, str]": (dict,),
    "Ended": (Ended,),
}


Schema = tuple[tuple[str, tuple[type, ...], bool, str], ...]
_SCHEMAS: dict[type, Schema] = {}


def _schema(cls: type[Message]) -> Schema:
    """Each field of `cls`: its name, the types it admits, whether None is one, and its
    annotation; read once per kind, not for every message (a job's start and end pass
    several)."""
    found = _SCHEMAS.get(cls)
    if found is None:
        rows = []
        for f in fields(cls):
            options = [a.strip() for a in str(f.type).split("|")]
            allowed = tuple(t for a in options for t in _TYPES.get(a, ()))
            rows.append((f.name, allowed, "None" in options, str(f.type)))
        found = _SCHEMAS[cls] = tuple(rows)
    return found
