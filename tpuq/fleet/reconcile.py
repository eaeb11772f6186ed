"""The controller's decision for one of a slot's VMs: pure, from what is recorded and what
the API shows now to what to record and which call to make.

A member (one of a slot's `count` VMs) is in one phase:

- waiting   nothing exists for its generation; a create is due at `next_try_at`
- creating  asked for (a node, or a queued resource) and not serving yet
- up        its node is READY (its hosts serve, or are joining)
- deleting  its generation ended (dead, gone, removed): delete what is left, then the
            next generation (a new node id) starts waiting

A generation ends once: its hosts are then marked lost and their jobs requeued (`lose`),
and its VM stops counting as provisioned (`vm_gone`). A new generation starts only when
nothing of the old one is left, so a slot never has two VMs. Every call has its id fixed
before it is made (spec.node_id), so a call repeated after a timeout or a restart finds
what the first one made.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from tpuq.fleet.port import ApiError, ErrorKind, NodeView, OpView, QueuedView, kind_of_rpc
from tpuq.fleet.spec import SlotSpec
from tpuq.fleet.states import QUEUED_WORDS, Health, Verdict, health, node_verdict, queued_verdict


@dataclass(frozen=True)
class Member:
    slot: str
    idx: int
    generation: int = 1
    phase: str = "waiting"
    op_name: str | None = None
    waiting_for: str | None = "a first create"
    since: float = 0.0
    tries: int = 0
    next_try_at: float | None = None
    error_kind: str | None = None
    node_state: str | None = None
    health: str | None = None
    queued_state: str | None = None
    ready_at: float | None = None
    joined_at: float | None = None
    creates: int = 0


class Call(str, Enum):
    CREATE = "create"
    DELETE_NODE = "delete node"
    DELETE_QUEUED = "delete queued resource"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Seen:
    """What the API shows of one member's current generation."""

    node: NodeView | None = None
    queued: QueuedView | None = None
    op: OpView | None = None  # its pending operation, when it has one and it was read
    joined: bool = False  # every host of it registered (and not lost) in the hosts table
    # a node or queued resource of another generation of this member still exists (an
    # orphan, being deleted): no new one is made until it is gone
    stale: bool = False


@dataclass(frozen=True)
class Policy:
    backoff_s: float = 30.0
    backoff_max_s: float = 1800.0
    join_s: float = 900.0


@dataclass(frozen=True)
class Step:
    member: Member  # recorded before the call
    call: Call | None = None
    lose: str | None = None  # the generation ended: its hosts are lost, for this reason
    vm_up: bool = False  # its VM became READY: it counts as provisioned from now
    vm_gone: str | None = None  # it stops counting, for this reason


def decide(m: Member, spec: SlotSpec | None, seen: Seen, now: float, p: Policy) -> Step:
    """The step for member `m`. `spec` None: its slot (or this index) was removed."""
    if spec is None:
        return _retire(m, seen, now, p)
    if m.phase == "deleting":
        step = _deleting(m, seen, now, p)
        if step.member.phase == "waiting" and (step.member.next_try_at or 0.0) <= now:
            return _merge(step, _waiting(step.member, spec, Seen(), now))
        return step
    if m.phase == "waiting":
        return _waiting(m, spec, seen, now)
    return _observed(m, spec, seen, now, p)


# ---- by phase ----------------------------------------------------------------------------
def _waiting(m: Member, spec: SlotSpec, seen: Seen, now: float) -> Step:
    if seen.node is not None or seen.queued is not None:
        # made by a create whose answer was lost (a timeout, a restart): it is this one
        return Step(_with(m, phase="creating"))
    if m.next_try_at is not None and now < m.next_try_at:
        return Step(m)
    if seen.stale:
        return Step(_with(m, waiting_for="deletion of an older VM of this slot"))
    return Step(_with(m, phase="creating", op_name=None, tries=m.tries + 1,
                      creates=m.creates + 1), Call.CREATE)


def _observed(m: Member, spec: SlotSpec, seen: Seen, now: float, p: Policy) -> Step:
    node, qr = seen.node, seen.queued
    if qr is not None:
        m = _with(m, queued_state=qr.state)
        v = queued_verdict(qr.state)
        if v is Verdict.DEAD:
            why = f"queued resource {qr.state}" + (f": {qr.error}" if qr.error else "")
            kind = kind_of_rpc(qr.error_code, qr.error) if qr.error_code else None
            return _end(m, now, why, Call.DELETE_QUEUED, kind, spec)
        if v is not Verdict.UP and node is None:
            words = QUEUED_WORDS.get(qr.state) or (
                "its queued resource being deleted (not by tpuq)" if v is Verdict.GOING
                else f"queued resource in a state tpuq does not know ({qr.state})")
            return Step(_with(m, phase="creating", waiting_for=_in(words, spec)))
        if v is Verdict.UP and node is None:  # its node was deleted under it
            return _end(m, now, "VM gone (its queued resource ACTIVE without it)",
                        Call.DELETE_QUEUED, None, spec)
    if node is None:
        return _nothing(m, spec, seen, now, p)
    return _node(m, spec, seen, node, now, p)


def _node(m: Member, spec: SlotSpec, seen: Seen, node: NodeView, now: float, p: Policy) -> Step:
    m = _with(m, node_state=node.state, health=node.health)
    v = node_verdict(node.state)
    delete = Call.DELETE_QUEUED if spec.queued else Call.DELETE_NODE
    if v is Verdict.DEAD:
        return _end(m, now, f"VM {node.state}", delete, None, spec)
    if v is Verdict.UP:
        return _up(m, spec, seen, node, now, p)
    was_up = m.phase == "up"
    words = {Verdict.PENDING: f"VM {node.state.lower()}",
             Verdict.BUSY: f"VM {node.state} (by Google)",
             Verdict.STOPPED: f"VM {node.state} (not by tpuq): start it, or delete it and "
                              "tpuq makes it anew",
             Verdict.GOING: "VM being deleted (not by tpuq)",
             Verdict.UNSEEN: f"VM in a state tpuq does not know ({node.state})"}[v]
    lost = v in (Verdict.STOPPED, Verdict.GOING) and was_up
    phase = "up" if v is Verdict.BUSY and was_up else "creating"
    return Step(_with(m, phase=phase, waiting_for=words, since=now if lost else m.since),
                lose=f"VM {node.state}" if lost else None,
                vm_gone=f"VM {node.state}" if lost else None)


def _up(m: Member, spec: SlotSpec, seen: Seen, node: NodeView, now: float, p: Policy) -> Step:
    fresh = m.phase != "up"
    ready_at = now if fresh or m.ready_at is None else m.ready_at
    m = _with(m, phase="up", ready_at=ready_at, tries=0, error_kind=None, next_try_at=None,
              op_name=None, since=ready_at if fresh else m.since)
    h = health(node.health)
    if seen.joined:
        words = {Health.SICK: f"a healthy VM (health {node.health})",
                 Health.MAINTENANCE: "the end of Google's maintenance"}.get(h)
        return Step(_with(m, joined_at=m.joined_at or now, waiting_for=words), vm_up=fresh)
    late = now - ready_at > p.join_s
    words = (f"its agent: READY for {_ago(now - ready_at)} and not registered; see the VM's "
             "startup script log (journalctl -u google-startup-scripts)") if late \
        else "its agent to register"
    return Step(_with(m, joined_at=None, waiting_for=words), vm_up=fresh)


def _nothing(m: Member, spec: SlotSpec, seen: Seen, now: float, p: Policy) -> Step:
    """Nothing of this generation is listed."""
    if m.phase == "up":
        return _next(m, now, "VM gone (deleted by Google: a spot VM's preemption)", spec)
    op = seen.op
    if op is not None and op.done and op.error_code:
        kind = kind_of_rpc(op.error_code, op.error_message)
        return _backoff(_with(m, phase="waiting", op_name=None), kind, op.error_message,
                        spec, now, p)
    if m.op_name is not None and (op is None or not op.done):
        return Step(_with(m, waiting_for=_in("the VM to be created", spec)))
    if m.op_name is not None or m.node_state is not None or m.queued_state is not None:
        return _next(m, now, "VM gone before it served", spec)  # made, and gone
    # a create with no answer on record (the controller died around its call): whether it
    # made something is unknown, so its id is not used again
    return _waiting(_with(m, phase="waiting", next_try_at=None, generation=m.generation + 1),
                    spec, seen, now)


def _deleting(m: Member, seen: Seen, now: float, p: Policy) -> Step:
    node, qr = seen.node, seen.queued
    if node is None and qr is None:
        held = m.error_kind in (ErrorKind.QUOTA, ErrorKind.PERMISSION, ErrorKind.INVALID)
        later = now + backoff_s(ErrorKind(m.error_kind), max(1, m.tries), p) if held else None
        return Step(_with(m, phase="waiting", generation=m.generation + 1, op_name=None,
                          node_state=None, health=None, queued_state=None, ready_at=None,
                          joined_at=None, next_try_at=later,
                          waiting_for=m.waiting_for if held else "its new VM to be made"))
    if (m.next_try_at or 0.0) > now:
        return Step(m)
    going = (qr is None or queued_verdict(qr.state) is Verdict.GOING) and \
        (node is None or node_verdict(node.state) is Verdict.GOING)
    if going:
        return Step(m)
    return Step(m, Call.DELETE_QUEUED if qr is not None else Call.DELETE_NODE)


RETIRED = "nothing: removed from the fleet"


def retired(m: Member) -> bool:
    """Removed, and nothing of it is left. The record stays: if its slot is declared
    again, its next VM takes a generation (an id) never used before."""
    return m.phase == "waiting" and m.waiting_for == RETIRED


def _retire(m: Member, seen: Seen, now: float, p: Policy) -> Step:
    if seen.node is None and seen.queued is None and m.phase in ("waiting", "deleting"):
        if retired(m):
            return Step(m)
        used = m.phase == "deleting" or m.creates > 0
        return Step(_with(m, phase="waiting", generation=m.generation + int(used),
                          op_name=None, waiting_for=RETIRED, tries=0, next_try_at=None,
                          error_kind=None, node_state=None, health=None, queued_state=None,
                          ready_at=None, joined_at=None, since=now))
    if m.phase != "deleting":
        step = Step(_with(m, phase="deleting", waiting_for="removal from the fleet", since=now),
                    lose="its slot was removed from the fleet",
                    vm_gone="removed from the fleet")
        m = step.member
    else:
        step = Step(m)
    if seen.node is None and seen.queued is None:
        return step
    return _merge(step, _deleting(m, seen, now, p))


# ---- how a generation ends, and how a try fails ------------------------------------------
def _end(m: Member, now: float, why: str, call: Call, kind: ErrorKind | None,
         spec: SlotSpec) -> Step:
    """Its VM (or request) is dead: lose its hosts and delete it. A request that failed
    for a reason a person must fix remembers it, so its next generation waits it out."""
    words = reason(kind, why, spec) if kind is not None else f"deletion of the dead VM ({why})"
    m = _with(m, phase="deleting", op_name=None, waiting_for=words, next_try_at=None,
              error_kind=kind.value if kind is not None else None,
              since=now if m.phase == "up" else m.since)
    return Step(m, call, lose=why, vm_gone=why)


def _next(m: Member, now: float, why: str, spec: SlotSpec) -> Step:
    """Gone with nothing left to delete: the next generation may be made at once."""
    m = _with(m, phase="waiting", generation=m.generation + 1, op_name=None, node_state=None,
              health=None, queued_state=None, ready_at=None, joined_at=None, next_try_at=None,
              waiting_for=f"its new VM ({why})", since=now if m.phase == "up" else m.since)
    return _merge(Step(m, lose=why, vm_gone=why), _waiting(m, spec, Seen(), now))


def _backoff(m: Member, kind: ErrorKind, message: str, spec: SlotSpec, now: float,
             p: Policy, jitter: float = 1.0) -> Step:
    delay = backoff_s(kind, max(1, m.tries), p) * jitter
    return Step(_with(m, error_kind=kind.value, next_try_at=now + delay,
                      waiting_for=reason(kind, message, spec)))


def after_call(m: Member, call: Call, spec: SlotSpec | None, result: str | None | ApiError,
               now: float, p: Policy, jitter: float) -> Member:
    """What to record once `call` answered: its operation's name, or an ApiError."""
    if not isinstance(result, ApiError):
        return _with(m, op_name=result)
    if call is Call.CREATE and result.api_kind is ErrorKind.EXISTS:
        return _with(m, phase="creating")  # made by an earlier try: watch it
    if call is Call.CREATE and spec is not None:
        # no answer (a timeout, a dropped connection): it may have made the VM, so the next
        # try takes a new id, and waits for whatever the old one made to be deleted
        unknown = result.api_kind is ErrorKind.TRANSIENT
        return _backoff(_with(m, phase="waiting", generation=m.generation + int(unknown)),
                        result.api_kind, result.message, spec, now, p, jitter).member
    # a delete that failed is tried again after a backoff, never in a tight loop
    delay = backoff_s(ErrorKind.TRANSIENT, max(1, m.tries), p) * jitter
    return _with(m, next_try_at=now + delay, tries=m.tries + 1,
                 waiting_for=f"deletion of the old VM: {result.message}")


def backoff_s(kind: ErrorKind, tries: int, p: Policy) -> float:
    """Capped exponential: a capacity or quota wait doubles from `backoff_s`; a request a
    person must fix (permission, invalid) starts at a quarter of the cap; an API hiccup
    starts at a tenth of `backoff_s`."""
    start = {ErrorKind.PERMISSION: p.backoff_max_s / 4, ErrorKind.INVALID: p.backoff_max_s / 4,
             ErrorKind.TRANSIENT: p.backoff_s / 10}.get(kind, p.backoff_s)
    return float(min(p.backoff_max_s, start * 2 ** min(tries - 1, 30)))


def reason(kind: ErrorKind, message: str, spec: SlotSpec) -> str:
    """What a member waits for after a failed try, in words for `tpuq status`."""
    short = message if len(message) <= 160 else message[:157] + "..."
    if kind is ErrorKind.STOCKOUT:
        return f"capacity in {spec.zone}"
    if kind is ErrorKind.QUOTA:
        return f"quota in {spec.project} ({short})"
    if kind is ErrorKind.PERMISSION:
        return f"permission to create TPU VMs in {spec.project} ({short})"
    if kind is ErrorKind.INVALID:
        return f"a valid request ({short}): fix the fleet file and apply it"
    return f"the Cloud TPU API ({short})"


# ---- helpers -----------------------------------------------------------------------------
def _with(m: Member, **changes: object) -> Member:
    return dataclasses.replace(m, **changes)  # type: ignore[arg-type]


def _merge(first: Step, then: Step) -> Step:
    return Step(then.member, then.call or first.call, first.lose or then.lose,
                first.vm_up or then.vm_up, first.vm_gone or then.vm_gone)


def _in(words: str, spec: SlotSpec) -> str:
    return f"{words} in {spec.zone}"


def _ago(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"
