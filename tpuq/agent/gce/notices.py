"""When maintenance and preemption notices take the host out of service, and give it back.

The metadata watcher (gce/metadata.py) reports what each source says now; this policy keeps
each source's word apart and decides:

- the host is out while any source has a notice in force, and back as soon as none has:
  GCE announces one maintenance through several keys (a `maintenance-event` and an
  `upcoming-maintenance` window), so one key's "over" says nothing about another's;
- a live migration is never in force: the VM's processes survive it;
- a window announced ahead is in force from `lead_s` before it opens, so jobs run until
  then; a timer wakes the policy at that moment, and what the sources say then decides,
  so a window withdrawn or moved meanwhile takes nothing out;
- preemption is terminal: a spot or preemptible VM being reclaimed goes away, so
  nothing said after it gives the host back;
- a repeated report changes nothing.

Inputs: `on_change(source, notice | None)` from the watcher's threads, `tick()` from the
timer. Outputs: `take_out(reason)` when the host leaves service (its jobs are preempted,
so they checkpoint and are requeued), `restate(reason)` when the notices in force change
while it is out, `give_back()` when the last one is over. The clock and the timer are
injected, so tests/unit/test_notices.py drives every decision without threads or sleeps.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from tpuq.agent.gce.metadata import Notice, NoticeKind, Source

log = logging.getLogger("tpuq.agent")

Cancel = Callable[[], None]
Schedule = Callable[[float, Callable[[], None]], Cancel]


def start_timer(delay_s: float, fn: Callable[[], None]) -> Cancel:
    """Call `fn` in `delay_s` seconds on a daemon thread; returns how to call it off."""
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()
    return timer.cancel


def due_at(notice: Notice, lead_s: float) -> float | None:
    """When `notice` takes the host out (epoch seconds; -inf: at once), None: never.
    A window announced ahead is acted on `lead_s` before it opens; maintenance the
    server says is ongoing, at once; an announcement with no readable window that is not
    ongoing, never (a 200 without a window is not a notice due now)."""
    if notice.kind is NoticeKind.MIGRATION:
        return None
    if notice.kind is not NoticeKind.UPCOMING or notice.ongoing:
        return -math.inf
    start = notice.window_start
    return None if start is None else start.timestamp() - lead_s


class NoticePolicy:
    """What each source says, whether that keeps the host out, and the timer for a window
    not yet due. Thread-safe: outputs are made under one lock, in the order decided."""

    def __init__(self, *, lead_s: float, take_out: Callable[[str], None],
                 restate: Callable[[str], None], give_back: Callable[[], None],
                 stopping: threading.Event, clock: Callable[[], float] = time.time,
                 schedule: Schedule = start_timer) -> None:
        self.lead_s = lead_s
        self._take_out = take_out
        self._restate = restate
        self._give_back = give_back
        self._stopping = stopping
        self._clock = clock
        self._schedule = schedule
        self._lock = threading.RLock()
        self._said: dict[Source, Notice] = {}  # a source absent here says nothing is pending
        self._out: str | None = None
        self._timer_at: float | None = None
        self._cancel_timer: Cancel | None = None

    @property
    def reason(self) -> str | None:
        """Every notice in force, in one line; None while the host is in service."""
        return self._out

    def on_change(self, source: Source, notice: Notice | None) -> None:
        """From the watcher: `source` now says `notice` (None: nothing pending)."""
        with self._lock:
            said = self._said.get(source)
            if notice == said:
                return
            if said is not None and said.kind is NoticeKind.PREEMPTED:
                log.info("%s: %s; a preempted VM is going away, so it stays out",
                         source, notice or "nothing pending")
                return
            if notice is None:
                del self._said[source]
            else:
                self._said[source] = notice
            if notice is not None and notice.kind is NoticeKind.MIGRATION:
                log.info("%s: live migration keeps processes running; nothing to do", notice)
            self._settle()

    def tick(self) -> None:
        """From the timer: a window's lead time may have come."""
        with self._lock:
            self._timer_at = None  # fired (or fired early: _settle arms it again)
            try:
                self._settle()
            except Exception:  # the timer's thread has nobody to tell but the log
                log.exception("acting on an announced window failed")

    def _in_force(self, now: float) -> list[Notice]:
        return [n for s in Source if (n := self._said.get(s)) is not None
                and (due := due_at(n, self.lead_s)) is not None and due <= now]

    def _settle(self) -> None:
        """Make the outputs agree with what the sources say now."""
        if self._stopping.is_set():  # the stop sequence preempts everything anyway
            self._arm(None, None)
            return
        now = self._clock()
        in_force = self._in_force(now)
        pending = [(due, n) for n in self._said.values()
                   if (due := due_at(n, self.lead_s)) is not None and due > now]
        at, first = min(pending, key=lambda p: p[0]) if pending else (None, None)
        self._arm(at, first)
        reason = "; ".join(str(n) for n in in_force) or None
        if reason == self._out:
            return
        was, self._out = self._out, reason
        if reason is None:
            log.info("every notice is over; taking work again")
            self._give_back()
        elif was is None:
            log.warning("notice: %s; preempting running jobs", reason)
            self._take_out(reason)
        else:
            log.warning("notices in force now: %s", reason)
            self._restate(reason)

    def _arm(self, at: float | None, notice: Notice | None) -> None:
        """One timer, for the earliest window not yet due; none when there is none."""
        if at == self._timer_at:
            return
        if self._cancel_timer is not None:
            self._cancel_timer()
            self._cancel_timer = None
        self._timer_at = at
        if at is not None:
            delay = at - self._clock()
            # a window hours away: let jobs run, and ask them to checkpoint shortly before
            log.warning("%s: preempting jobs in %.0fs", notice, delay)
            self._cancel_timer = self._schedule(delay, self.tick)
