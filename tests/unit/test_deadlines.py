"""The supervisor's decisions (agent/attempts/deadlines.py), driven by a fake clock."""

from __future__ import annotations

import pytest

from tpuq.agent.attempts.deadlines import AttemptDeadlines, Due, Verdict


def deadlines(**kw: float | None) -> AttemptDeadlines:
    args: dict = {"now": 100.0, "renew_every_s": 10.0, "retry_every_s": 2.0,
                  "time_limit_s": None, "grace_s": 5.0}
    args.update(kw)
    return AttemptDeadlines(**args)


def test_renews_every_interval_and_not_before() -> None:
    d = deadlines()
    assert d.wait_s(100.0) == 10.0
    assert d.due(105.0, woken=False, kill_now=False) == Due()
    assert d.due(110.0, woken=False, kill_now=False) == Due(renew=True)
    assert d.wait_s(110.0) == 10.0, "the next renewal is one interval after this one"


def test_a_wake_up_renews_at_once_to_read_a_stop_request() -> None:
    d = deadlines()
    assert d.due(101.0, woken=True, kill_now=False) == Due(renew=True)
    assert d.next_deadline() == 111.0


def test_a_stop_request_signals_once_then_kills_after_the_grace() -> None:
    d = deadlines(grace_s=5.0)
    assert d.due(110.0, woken=False, kill_now=False).renew
    assert d.renewed(110.0, held=True, stop_requested=True) is Verdict.SIGNAL
    d.signalled(110.0)
    assert d.renewed(111.0, held=True, stop_requested=True) is Verdict.RUN_ON, "signal once"
    assert d.wait_s(110.0) == 5.0, "the kill is the next deadline"
    assert d.due(114.9, woken=False, kill_now=False).kill is False
    assert d.due(115.0, woken=False, kill_now=False).kill is True
    assert d.kill_at is None, "one kill per deadline"


def test_kill_now_kills_without_waiting_for_the_grace() -> None:
    d = deadlines()
    d.signalled(100.0)
    assert d.due(100.1, woken=True, kill_now=True) == Due(kill=True, renew=True)


def test_a_lost_lease_fences_the_attempt_out() -> None:
    assert deadlines().renewed(110.0, held=False, stop_requested=False) is Verdict.FENCED


def test_an_unreachable_database_retries_sooner_and_the_job_runs_on() -> None:
    d = deadlines(renew_every_s=10.0, retry_every_s=2.0)
    d.due(110.0, woken=False, kill_now=False)
    assert d.renewed(110.0, held=None, stop_requested=False) is Verdict.RUN_ON
    assert d.next_deadline() == 112.0


def test_the_time_limit_asks_for_a_timeout_until_the_stop_signal_goes_out() -> None:
    d = deadlines(time_limit_s=30.0, renew_every_s=100.0)
    assert d.next_deadline() == 130.0
    assert d.due(130.0, woken=False, kill_now=False) == Due(ask_timeout=True, renew=True)
    assert d.renewed(130.0, held=True, stop_requested=True) is Verdict.SIGNAL
    d.signalled(130.0)
    assert d.limit_at() is None, "once stopping, the limit is spent"
    assert d.next_deadline() == 135.0


@pytest.mark.parametrize("limit", [None, 30.0])
def test_no_deadline_is_ever_in_the_past_after_acting(limit: float | None) -> None:
    d = deadlines(time_limit_s=limit)
    now = 100.0
    for _ in range(50):
        now = d.next_deadline()
        due = d.due(now, woken=False, kill_now=False)
        if due.renew:
            d.renewed(now, held=True, stop_requested=due.ask_timeout)
        if due.ask_timeout:
            d.signalled(now)
        assert d.next_deadline() > now


def test_an_adopted_attempt_keeps_the_time_it_has_run() -> None:
    d = deadlines(time_limit_s=30.0, ran_s=25.0)
    assert d.limit_at() == 105.0 and d.next_deadline() == 105.0


def test_a_gang_leader_watches_its_workers_between_renewals() -> None:
    d = deadlines(watch_every_s=1.0)
    assert d.wait_s(100.0) == 1.0
    assert d.due(101.0, woken=False, kill_now=False) == Due(watch=True)
    assert d.due(101.5, woken=False, kill_now=False) == Due()
    assert d.due(102.0, woken=False, kill_now=False) == Due(watch=True)
    assert d.due(110.0, woken=False, kill_now=False) == Due(renew=True), "a renewal watches too"
    assert d.next_deadline() == 111.0
    assert deadlines().due(101.0, woken=False, kill_now=False) == Due(), "others never watch"


def test_a_short_stop_kills_after_its_own_grace_not_the_jobs() -> None:
    d = deadlines(grace_s=600.0)
    d.signalled(100.0, 5.0)
    assert d.wait_s(100.0) == 5.0
    assert d.due(105.0, woken=False, kill_now=False).kill is True


def test_a_session_is_warned_once_before_its_time_limit() -> None:
    d = deadlines(time_limit_s=100.0, renew_every_s=50.0, warn_s=60.0)  # limit at 200
    assert d.wait_s(100.0) == 40.0, "the warning (at 140) is the next deadline"
    assert not d.due(139.9, woken=False, kill_now=False).warn
    assert d.due(140.0, woken=False, kill_now=False) == Due(warn=True)
    assert not d.due(141.0, woken=False, kill_now=False).warn, "once"
    assert d.next_deadline() == 150.0
    assert d.due(200.0, woken=False, kill_now=False).ask_timeout


def test_no_warning_without_a_limit_or_once_stopping() -> None:
    assert deadlines(warn_s=25.0).warn_at() is None
    d = deadlines(time_limit_s=100.0, warn_s=25.0)
    d.signalled(101.0)
    assert d.warn_at() is None
