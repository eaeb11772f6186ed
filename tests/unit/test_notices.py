"""NoticePolicy's decisions: when notices take the host out of service and give it back.

A fake clock and a fake timer drive the policy: no threads, no sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timezone

import pytest

from tpuq.agent.gce.metadata import Notice, NoticeKind, Source
from tpuq.agent.gce.notices import NoticePolicy

T0 = 1_900_000_000.0  # epoch seconds, 2030-03-17
LEAD_S = 300.0
TERMINATE = Notice(NoticeKind.MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
MIGRATE = Notice(NoticeKind.MIGRATION, "MIGRATE_ON_HOST_MAINTENANCE")
PREEMPTED = Notice(NoticeKind.PREEMPTED)


def window(at: float, kind: str = "SCHEDULED") -> Notice:
    """An upcoming-maintenance notice for a window opening at epoch `at`."""
    start = datetime.fromtimestamp(at, timezone.utc).isoformat().replace("+00:00", "Z")
    return Notice(NoticeKind.UPCOMING, kind, start)


class Timers:
    """The injected timer: remembers what was scheduled; `fire` runs it by hand."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.armed: list[tuple[float, Callable[[], None], list[bool]]] = []

    def __call__(self, delay_s: float, fn: Callable[[], None]) -> Callable[[], None]:
        done = [False]
        self.armed.append((self.clock.now + delay_s, fn, done))
        return lambda: done.__setitem__(0, True)

    def live(self) -> list[float]:
        """When the timers neither called off nor fired are due."""
        return [at for at, _, done in self.armed if not done[0]]

    def fire(self, index: int = -1) -> None:
        """Let time reach timer `index` and run it, called off or not (a timer's thread
        may already run when cancel comes)."""
        at, fn, done = self.armed[index]
        self.clock.now = max(self.clock.now, at)
        done[0] = True
        fn()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Host:
    """The policy with its outputs recorded in order."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.timers = Timers(self.clock)
        self.stopping = threading.Event()
        self.outputs: list[tuple[str, str | None]] = []
        self.policy = NoticePolicy(
            lead_s=LEAD_S, clock=self.clock, schedule=self.timers, stopping=self.stopping,
            take_out=lambda reason: self.outputs.append(("take out", reason)),
            restate=lambda reason: self.outputs.append(("restate", reason)),
            give_back=lambda: self.outputs.append(("give back", None)))

    def says(self, source: Source, notice: Notice | None) -> list[tuple[str, str | None]]:
        """Report a source's new word; returns the outputs it caused."""
        before = len(self.outputs)
        self.policy.on_change(source, notice)
        return self.outputs[before:]


@pytest.fixture
def host() -> Host:
    return Host()


def test_issue_sequence_event_and_window_both_in_force_then_both_over_gives_back(host):
    """GCE announces one maintenance through the event and an upcoming window; the host
    stays out until both are over, and then is given back without a reboot."""
    ongoing = window(T0 - 60)
    assert host.says(Source.EVENT, TERMINATE) == [
        ("take out", "maintenance-event TERMINATE_ON_HOST_MAINTENANCE")]
    both = f"maintenance-event TERMINATE_ON_HOST_MAINTENANCE; {ongoing}"
    assert host.says(Source.UPCOMING, ongoing) == [("restate", both)]
    assert host.policy.reason == both
    assert host.says(Source.EVENT, None) == [("restate", str(ongoing))]
    assert host.policy.reason == str(ongoing), "the window still keeps the host out"
    assert host.says(Source.UPCOMING, None) == [("give back", None)]
    assert host.policy.reason is None


def test_reverse_order_window_first_and_event_over_last(host):
    ongoing = window(T0)
    assert host.says(Source.UPCOMING, ongoing) == [("take out", str(ongoing))]
    assert host.says(Source.EVENT, TERMINATE) == [
        ("restate", f"maintenance-event TERMINATE_ON_HOST_MAINTENANCE; {ongoing}")]
    assert host.says(Source.UPCOMING, None) == [
        ("restate", "maintenance-event TERMINATE_ON_HOST_MAINTENANCE")]
    assert host.says(Source.EVENT, None) == [("give back", None)]


def test_window_far_ahead_lets_jobs_run_until_the_lead_time(host):
    far = window(T0 + 3600)
    assert host.says(Source.UPCOMING, far) == []
    assert host.timers.live() == [T0 + 3600 - LEAD_S]
    host.clock.now = T0 + 1800
    host.policy.tick()  # a timer that fires early takes nothing out, and is armed again
    assert host.outputs == [] and host.timers.live() == [T0 + 3600 - LEAD_S]
    host.timers.fire()
    assert host.outputs == [("take out", str(far))]
    assert host.timers.live() == []
    assert host.says(Source.UPCOMING, None) == [("give back", None)]


def test_window_withdrawn_before_the_lead_time_takes_nothing_out_later(host):
    host.says(Source.UPCOMING, window(T0 + 3600))
    assert host.says(Source.UPCOMING, None) == []
    assert host.timers.live() == [], "the pending timer is called off"
    host.timers.fire(0)  # and if it fires all the same, it finds nothing due
    assert host.outputs == [] and host.policy.reason is None


def test_window_moved_later_rearms_the_timer_and_the_old_one_does_nothing(host):
    host.says(Source.UPCOMING, window(T0 + 3600))
    later = window(T0 + 7200)
    assert host.says(Source.UPCOMING, later) == []
    assert host.timers.live() == [T0 + 7200 - LEAD_S]
    host.timers.fire(0)
    assert host.outputs == []
    host.timers.fire()
    assert host.outputs == [("take out", str(later))]


def test_window_inside_the_lead_time_or_ongoing_maintenance_takes_out_at_once(host):
    near = window(T0 + LEAD_S / 2)
    assert host.says(Source.UPCOMING, near) == [("take out", str(near))]
    ongoing = Notice(NoticeKind.UPCOMING, "UNSCHEDULED", None, ongoing=True)
    assert host.says(Source.UPCOMING, ongoing) == [("restate", str(ongoing))]
    assert host.timers.armed == []


def test_an_announcement_without_a_window_acts_only_when_ongoing(host):
    """A 200 whose window cannot be read is not a notice due now: at agent start it
    would take every host out and keep it out."""
    unknown = Notice(NoticeKind.UPCOMING, "SCHEDULED", None)
    assert host.says(Source.UPCOMING, unknown) == []
    assert host.timers.armed == []
    ongoing = Notice(NoticeKind.UPCOMING, "SCHEDULED", None, ongoing=True)
    assert host.says(Source.UPCOMING, ongoing) == [("take out", str(ongoing))]


def test_live_migration_needs_nothing(host):
    assert host.says(Source.EVENT, MIGRATE) == []
    assert host.says(Source.EVENT, None) == []
    assert host.says(Source.EVENT, TERMINATE)[0][0] == "take out"
    assert host.says(Source.EVENT, MIGRATE) == [("give back", None)], \
        "the event is migrate-only now: nothing keeps the host out"


def test_preemption_is_terminal(host):
    assert host.says(Source.PREEMPTED, PREEMPTED) == [("take out", "instance preempted")]
    assert host.says(Source.PREEMPTED, None) == []
    assert host.says(Source.EVENT, TERMINATE) == [
        ("restate", "maintenance-event TERMINATE_ON_HOST_MAINTENANCE; instance preempted")]
    assert host.says(Source.EVENT, None) == [("restate", "instance preempted")]
    assert host.policy.reason == "instance preempted"


def test_duplicates_and_clears_of_nothing_are_ignored(host):
    far = window(T0 + 3600)
    assert host.says(Source.EVENT, None) == [] and host.says(Source.UPCOMING, None) == []
    assert host.says(Source.EVENT, TERMINATE) != []
    assert host.says(Source.EVENT, Notice(NoticeKind.MAINTENANCE,
                                          "TERMINATE_ON_HOST_MAINTENANCE")) == []
    assert host.says(Source.UPCOMING, far) == []
    assert host.says(Source.UPCOMING, window(T0 + 3600)) == []
    assert host.says(Source.PREEMPTED, PREEMPTED) != []
    assert host.says(Source.PREEMPTED, PREEMPTED) == []
    assert len(host.timers.armed) == 1, "a repeated window arms no second timer"


def test_a_stopping_agent_is_neither_taken_out_nor_given_back(host):
    host.says(Source.EVENT, TERMINATE)
    host.says(Source.UPCOMING, window(T0 + 3600))
    host.stopping.set()
    assert host.says(Source.EVENT, None) == []
    assert host.timers.live() == [], "nothing is pending for an agent that stops"


def test_window_in_force_moved_days_later_gives_the_host_back_until_its_new_lead(host):
    near = window(T0 + 60)
    assert host.says(Source.UPCOMING, near) == [("take out", str(near))]
    later = window(T0 + 86400)
    assert host.says(Source.UPCOMING, later) == [("give back", None)]
    assert host.timers.live() == [T0 + 86400 - LEAD_S]
    host.timers.fire()
    assert host.outputs[-1] == ("take out", str(later))
