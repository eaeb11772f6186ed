"""When a supervised attempt must renew its lease, ask for its time limit, and be killed.

A pure decision object: the supervisor's wait loop feeds it the clock and what happened
(a wake-up, a lease renewal's result) and does what it answers. No I/O and no clock of
its own, so every path is unit-tested with a fake clock (tests/unit/test_deadlines.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Due:
    """What to do now, in this order: kill the group, ask for the time limit, renew,
    watch (a slice job's worker 0 looks at the other workers)."""

    kill: bool = False
    ask_timeout: bool = False
    renew: bool = False
    watch: bool = False
    warn: bool = False  # tell a session its time limit is near


class Verdict(Enum):
    RUN_ON = "run on"  # nothing new (or the database is away: the job runs on)
    SIGNAL = "signal"  # a stop was requested: send the stop signal now
    FENCED = "fenced"  # the lease is someone else's: kill now and record nothing


class AttemptDeadlines:
    """Deadlines of one running attempt (monotonic seconds)."""

    def __init__(self, *, now: float, renew_every_s: float, retry_every_s: float,
                 time_limit_s: float | None, grace_s: float, ran_s: float = 0.0,
                 watch_every_s: float | None = None, warn_s: float | None = None) -> None:
        """`ran_s`: how long the attempt has run already (one an agent adopts);
        `watch_every_s`: look at the other workers of a slice job this often; `warn_s`:
        say so this long before the time limit (a session's person)."""
        self.warn_s = warn_s
        self.warned = False
        self.started = now - ran_s
        self.renew_every_s = renew_every_s
        self.retry_every_s = retry_every_s
        self.time_limit_s = time_limit_s
        self.grace_s = grace_s
        self.next_renew = now + renew_every_s
        self.watch_every_s = watch_every_s
        self.next_watch = None if watch_every_s is None else now + watch_every_s
        self.kill_at: float | None = None  # end of the grace period after the stop signal
        self.signalled_at: float | None = None

    def limit_at(self) -> float | None:
        """When the time limit is reached; None without one or once the job is stopping."""
        if self.time_limit_s is None or self.signalled_at is not None:
            return None
        return self.started + self.time_limit_s

    def warn_at(self) -> float | None:
        """When to say the time limit is near; None without one, or once said."""
        limit = self.limit_at()
        if limit is None or self.warn_s is None or self.warned:
            return None
        return limit - self.warn_s

    def next_deadline(self) -> float:
        return min(t for t in (self.next_renew, self.kill_at, self.limit_at(), self.next_watch,
                               self.warn_at()) if t is not None)

    def wait_s(self, now: float) -> float:
        return max(0.0, self.next_deadline() - now)

    def due(self, now: float, *, woken: bool, kill_now: bool) -> Due:
        """After a wait: `woken` by another thread (a stop request may be waiting in the
        database), `kill_now` asked by the agent's second stop signal."""
        kill = kill_now or (self.kill_at is not None and now >= self.kill_at)
        if kill:
            self.kill_at = None
        limit, warn_at = self.limit_at(), self.warn_at()
        warn = warn_at is not None and now >= warn_at
        self.warned = self.warned or warn
        ask_timeout = limit is not None and now >= limit
        renew = woken or ask_timeout or now >= self.next_renew
        if renew:
            self.next_renew = now + self.renew_every_s
        watch = self.next_watch is not None and now >= self.next_watch and not renew
        if self.watch_every_s is not None and (watch or renew):
            self.next_watch = now + self.watch_every_s  # a renewal watches too
        return Due(kill=kill, ask_timeout=ask_timeout, renew=renew, watch=watch, warn=warn)

    def renewed(self, now: float, *, held: bool | None, stop_requested: bool) -> Verdict:
        """The renewal's result: `held` None while the database is unavailable."""
        if held is None:
            self.next_renew = now + min(self.renew_every_s, self.retry_every_s)
            return Verdict.RUN_ON
        if not held:
            return Verdict.FENCED
        if stop_requested and self.signalled_at is None:
            return Verdict.SIGNAL
        return Verdict.RUN_ON

    def signalled(self, now: float, grace_s: float | None = None) -> None:
        """The stop signal went out: SIGKILL follows after the grace period (`grace_s`,
        when this stop gives another than the job's)."""
        self.signalled_at = now
        self.kill_at = now + (self.grace_s if grace_s is None else grace_s)
