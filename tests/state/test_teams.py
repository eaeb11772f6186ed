"""Teams: quotas and members in the database, chip-hours charged from attempts."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import insert

from tests.state.rows import register_host
from tpuq.scheduler import passes
from tpuq.settings import Settings
from tpuq.spec import JobSpec, SpecError
from tpuq.state import jobs, snapshot, teams, usage
from tpuq.state.db import SCHEMA_HEAD
from tpuq.state.models import Attempt
from tpuq.state.states import NOT_CHARGED

H = 3600.0
NOW = time.mktime((2026, 3, 11, 12, 0, 0, 0, 0, -1))  # a Wednesday noon, local time


def spec(team: str, chips: int | None = None, **kw: object) -> JobSpec:
    return JobSpec(command=["/bin/true"], cwd="/", owner=kw.pop("owner", "u"),  # type: ignore[arg-type]
                   team=team, chips=chips, **kw)  # type: ignore[arg-type]


def add_attempt(s, job_id: int, chips: int, started: float | None, ended: float | None,
                outcome: str | None, number: int = 1) -> None:
    s.execute(insert(Attempt).values(job_id=job_id, number=number, host="h",
                                     chips=list(range(chips)), assigned_at=started or NOW,
                                     started_at=started, ended_at=ended, outcome=outcome,
                                     code_revision=SCHEMA_HEAD))


def test_quota_crud_and_members(db):
    with db.write() as s:
        teams.set_quota(s, "vision", max_chips=8, budget_chip_hours=500.0,
                        max_chips_by_type={"v4": 8})
        teams.set_quota(s, "vision", share=2.0)  # only the given fields change
        assert teams.add_member(s, "vision", "alice")
        assert not teams.add_member(s, "vision", "alice")
        assert teams.add_member(s, "nlp", "bob")  # creates the team
    with db.read() as s:
        v = teams.get(s, "vision")
        assert (v.share, v.max_chips, v.budget_chip_hours, v.max_chips_by_type,
                v.budget_period) == (2.0, 8, 500.0, {"v4": 8}, "week")
        assert [t.name for t in teams.all_teams(s)] == ["nlp", "vision"]
        assert teams.members(s) == {"nlp": ["bob"], "vision": ["alice"]}
    with db.write() as s:
        assert teams.remove_member(s, "vision", "alice")
        assert not teams.remove_member(s, "vision", "alice")
        teams.set_quota(s, "vision", max_chips=None)
        with pytest.raises(teams.TeamError, match="unknown budget period 'fortnight'"):
            teams.set_quota(s, "vision", budget_period="fortnight")
        with pytest.raises(teams.TeamError, match="cannot be negative"):
            teams.set_quota(s, "vision", max_chips=-1)
    with db.read() as s:
        assert teams.get(s, "vision").max_chips is None


def test_preempted_and_other_not_charged_chip_hours_are_recorded_but_not_charged(db):
    with db.write() as s:
        ids = [jobs.submit(s, spec("vision")) for _ in range(7)]
        add_attempt(s, ids[0], 4, NOW - 3 * H, NOW - 1 * H, "succeeded")  # 8 chip-hours
        add_attempt(s, ids[1], 2, NOW - 2 * H, NOW - 1 * H, "failed")  # 2
        add_attempt(s, ids[2], 1, NOW - 1 * H, None, None)  # running: 1 so far
        for job_id, outcome in zip(ids[3:], sorted(NOT_CHARGED), strict=True):
            add_attempt(s, job_id, 4, NOW - 5 * H, NOW - 1 * H, outcome.value)  # 16 each, free
        add_attempt(s, ids[3], 4, NOW - 1 * H, NOW, "succeeded", number=2)  # retry: 4
        add_attempt(s, ids[4], 4, None, None, None, number=2)  # assigned, never started
    with db.read() as s:
        u = usage.usage(s, now=NOW, half_life_h=float("inf"))["vision"]
    assert u.period == pytest.approx(15.0)
    assert u.decayed == pytest.approx(15.0)
    assert u.last_24h == pytest.approx(15.0)
    with db.read() as s:
        rows = s.query(Attempt).filter(Attempt.outcome.in_([o.value for o in NOT_CHARGED])).all()
    assert len(rows) == 4, "uncharged attempts stay on record"


def test_usage_is_split_by_period_and_decays_with_half_life(db):
    week_start = usage.period_start(NOW, "week")
    with db.write() as s:
        a, b = jobs.submit(s, spec("nlp")), jobs.submit(s, spec("nlp"))
        # 2 chips from 2 h before the week started to 1 h after: 2 chip-hours this week
        add_attempt(s, a, 2, week_start - 2 * H, week_start + 1 * H, "succeeded")
        # 1 chip for 10 h, ended one half-life (24 h) ago
        add_attempt(s, b, 1, NOW - 34 * H, NOW - 24 * H, "succeeded")
        teams.set_quota(s, "nlp", budget_period="day")
    with db.read() as s:
        u = usage.usage(s, now=NOW, half_life_h=24.0, periods={"nlp": "day"})["nlp"]
    ended_ago = NOW - (week_start + 1 * H)
    assert u.by_period["week"] == pytest.approx(2.0 + 10.0 * (NOW - 34 * H >= week_start))
    assert u.by_period["day"] == pytest.approx(0.0)
    assert u.period == u.by_period["day"]
    assert u.decayed == pytest.approx(6.0 * 0.5 ** (ended_ago / (24 * H)) + 10.0 * 0.5)


def test_periods_start_monday_midnight_and_the_first_of_the_month():
    start, end = usage.period_start(NOW, "week"), usage.period_end(NOW, "week")
    t = time.localtime(start)
    assert (t.tm_wday, t.tm_hour, t.tm_min, t.tm_mday) == (0, 0, 0, 9)
    assert time.localtime(end).tm_mday == 16 and start <= NOW < end
    assert time.localtime(usage.period_start(NOW, "month")).tm_mday == 1
    assert time.localtime(usage.period_end(NOW, "month")).tm_mon == 4
    dec = time.mktime((2026, 12, 20, 9, 0, 0, 0, 0, -1))
    assert time.localtime(usage.period_end(dec, "month"))[:3] == (2027, 1, 1)
    assert usage.period_end(NOW, "day") - usage.period_start(NOW, "day") in (23 * H, 24 * H,
                                                                              25 * H)


def test_scheduler_views_carry_limits_usage_and_time_estimates(db):
    with db.write() as s:
        register_host(s, "tpu-a")
        teams.set_quota(s, "vision", max_chips=2, max_chips_per_user=1, share=3.0,
                        max_chips_by_type={"v4": 2}, budget_chip_hours=10.0, budget_period="day",
                        grant_expires_at=NOW + 86400 * 30)
        job_id = jobs.submit(s, spec("vision", chips=1, time_limit_s=2 * H))
    with db.read() as s:
        snap = snapshot.read(s, host_stale_s=60.0, half_life_h=168.0)
    job_views, _, team_views = passes.views(snap)
    assert [j.est_hours for j in job_views if j.id == job_id] == [2.0]
    v = team_views["vision"]
    assert (v.share, v.max_chips, v.max_chips_per_user, dict(v.max_chips_by_type)) == \
        (3.0, 2, 1, {"v4": 2})
    assert v.budget_left == pytest.approx(10.0) and v.budget_period == "daily"
    assert v.budget_resets_at == usage.period_end(snap.now, "day")
    assert v.grant_expires_at == NOW + 86400 * 30


def test_over_quota_team_waits_with_the_reason_in_words(db):
    with db.write() as s:
        register_host(s, "tpu-a")
        teams.set_quota(s, "vision", max_chips=0)
        teams.set_quota(s, "nlp", budget_chip_hours=0.0)
        v = jobs.submit(s, spec("vision", chips=1))
        n = jobs.submit(s, spec("nlp", chips=1))
        ok = jobs.submit(s, spec("other", chips=1))
    cfg = Settings(host_stale_s=60.0)
    with db.read() as s:
        _, plan = passes.plan_for(s, cfg)
    assert [a.job_id for a in plan.assignments] == [ok]
    assert plan.waiting[v] == "team vision at 0/0 chips"
    assert plan.waiting[n].startswith("weekly budget spent, resets Mon 00:00")


def test_submit_refuses_a_shape_no_registered_host_gives(db):
    with db.write() as s:
        jobs.submit(s, spec("t", chips=3))  # no host registered yet: accepted
        register_host(s, "tpu-a")
        jobs.submit(s, spec("t", chips=2))
        jobs.submit(s, spec("t", chips=8, tpu_type="v5litepod-8"))  # no such host yet
    with pytest.raises(SpecError, match="^no host offers 3 chips: 4-chip hosts allow 1, 2, 4$"):
        with db.write() as s:
            jobs.submit(s, spec("t", chips=3))
    with db.write() as s:
        register_host(s, "tpu-b", tpu_type="v5litepod-8", chips=range(8))
        jobs.submit(s, spec("t", chips=8))
    with pytest.raises(SpecError, match="no host of type v4-8 offers 8 chips: 4-chip hosts"):
        with db.write() as s:
            jobs.submit(s, spec("t", chips=8, tpu_type="v4-8"))
