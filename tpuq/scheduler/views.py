"""What the placement policy sees and decides: plain frozen values (stdlib only).

The scheduler loop builds these views from a database snapshot; the policy and its
helpers (fairshare.py, hostpool.py, quota.py) read them and never touch the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_NO_COUNTS: Mapping[str, int] = MappingProxyType({})
_NO_TIMES: Mapping[int, float] = MappingProxyType({})


def _no_counts() -> Mapping[str, int]:
    return _NO_COUNTS


@dataclass(frozen=True)
class HostView:
    name: str
    tpu_type: str | None  # e.g. "v4-8"; None = unknown (only jobs of any type go there)
    chips: tuple[int, ...]  # all chip indices on the host
    free: frozenset[int]  # chips not allocated right now
    schedulable: bool = True  # False when draining, busy (foreign holder), heartbeat stale
    out_of_service: str = ""  # why not, in words, for waiting reasons ("draining", ...)
    # busy chip -> when its job's time limit ends (epoch s); a busy chip not listed frees
    # at an unknown time (its job has no time limit)
    free_at: Mapping[int, float] = field(default_factory=lambda: _NO_TIMES)
    # a worker of a multi-host slice: it takes only slice jobs, with its whole slice
    slice: str | None = None
    worker: int = 0
    slice_type: str | None = None  # the slice's accelerator type, e.g. "v4-32"
    # chip counts the host does not offer (its probe failed, or no bounds are known)
    withheld: frozenset[int] = frozenset()
    draining: bool = False  # leaving service: a checkpoint there is not waited for


@dataclass(frozen=True)
class JobView:
    id: int
    team: str
    user: str
    priority: int  # higher first
    submitted_at: float  # epoch seconds; older first
    chips: int | None  # None = whole host
    tpu_type: str | None = None  # None = any
    not_before: float | None = None  # retry backoff or --begin: not eligible before this
    begin_at: float | None = None  # --begin: the reason names it (not_before holds it too)
    depends_on: tuple[int, ...] = ()  # job ids that must have succeeded
    est_hours: float = 0.0  # for budget checks (0 = unknown, not checked)
    time_limit_s: float | None = None  # backfill: may run on reserved chips if it ends first
    array_id: int | None = None  # a task of this array...
    array_throttle: int | None = None  # ...of which at most this many run at once
    workers: int | None = None  # a slice job: every worker of one slice of `tpu_type`
    # the host (a slice job's: the slice) that holds its checkpoints on its own disk; the
    # job prefers it, and waits for it until `home_until` while it is expected back
    home: str | None = None
    home_until: float | None = None


@dataclass(frozen=True)
class TeamView:
    name: str
    share: float = 1.0  # relative fair share weight
    usage: float = 0.0  # decayed chip-hours so far (tpuq.state.usage.decay)
    running_chips: int = 0
    running_by_type: Mapping[str, int] = field(default_factory=_no_counts)  # by host tpu_type
    running_by_user: Mapping[str, int] = field(default_factory=_no_counts)
    max_chips: int | None = None
    max_chips_by_type: Mapping[str, int] = field(default_factory=_no_counts)  # "v4-8" or "v4"
    max_chips_per_user: int | None = None
    budget_left: float | None = None  # chip-hours left in the current period
    budget_resets_at: float | None = None  # epoch seconds, for the wait reason
    grant_expires_at: float | None = None
    budget_period: str = "weekly"  # word used in budget reasons


@dataclass(frozen=True)
class Assignment:
    job_id: int
    host: str  # a slice job's: the slice's name
    chips: tuple[int, ...]
    # a slice job's workers in worker order: (host, its chips)
    workers: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class Plan:
    assignments: tuple[Assignment, ...]
    waiting: Mapping[int, str]  # job_id -> reason, for every queued job not assigned
    reserved: Mapping[str, int] = field(default_factory=_no_counts)  # host -> job id
