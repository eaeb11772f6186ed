"""Examples for the pure placement-and-ordering policy (tpuq.scheduler.policy)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import pytest

from tpuq.scheduler.fairshare import group_by_team, sort_within_team, teams_in_order
from tpuq.scheduler.policy import plan
from tpuq.scheduler.views import Assignment, HostView, JobView, TeamView
from tpuq.shapes import allowed_chip_counts
from tpuq.state.usage import decay

NOW = 1_750_000_000.0


def host(name: str, n: int = 4, free: set[int] | None = None, **kw: object) -> HostView:
    chips = tuple(range(n))
    tpu_type = kw.pop("tpu_type", "v4-8")
    free_set = frozenset(chips if free is None else free)
    return HostView(name, tpu_type, chips, free_set, **kw)  # type: ignore[arg-type]


def job(id: int, team: str = "a", chips: int | None = 1, **kw: object) -> JobView:
    fields: dict[str, object] = {"user": "u", "priority": 0, "submitted_at": NOW - 100 + id}
    fields.update(kw)
    return JobView(id=id, team=team, chips=chips, **fields)  # type: ignore[arg-type]


def order(jobs: Sequence[JobView], teams: Mapping[str, TeamView], now: float) -> list[JobView]:
    """Every job in the order the planner scans them, from the functions it calls."""
    groups = group_by_team(jobs)
    out: list[JobView] = []
    for name in teams_in_order(groups, teams):
        sort_within_team(groups[name])
        out.extend(groups[name])
    return out


# --- helpers -----------------------------------------------------------------------------


def test_allowed_chip_counts() -> None:
    assert allowed_chip_counts(4) == (1, 2, 4)
    assert allowed_chip_counts(8) == (1, 2, 4, 8)
    assert allowed_chip_counts(1) == (1,)
    assert allowed_chip_counts(6) == (6,)
    assert allowed_chip_counts(0) == ()


def test_decay() -> None:
    assert decay(100.0, 3600, 3600) == pytest.approx(50.0)
    assert decay(100.0, 7200, 3600) == pytest.approx(25.0)
    assert decay(100.0, 0, 3600) == 100.0
    assert decay(100.0, -5, 3600) == 100.0  # clock went backwards: never inflate
    assert decay(100.0, 10, 0) == 0.0
    assert decay(100.0, 10, float("inf")) == 100.0


# --- ordering ----------------------------------------------------------------------------


def test_order_fair_share_then_priority_then_age_then_id() -> None:
    teams = {"a": TeamView("a", share=1, usage=10), "b": TeamView("b", share=2, usage=10)}
    jobs = [
        job(1, "a", priority=9),
        job(2, "b", priority=0, submitted_at=NOW - 10),
        job(3, "b", priority=1, submitted_at=NOW - 5),
        job(4, "b", priority=0, submitted_at=NOW - 50),
        job(6, "b", priority=0, submitted_at=NOW - 50),
        job(5, "b", priority=0, submitted_at=NOW - 50),
    ]
    # b: usage/share 5 < a: 10, so all of b first despite a's priority.
    assert [j.id for j in order(jobs, teams, NOW)] == [3, 4, 5, 6, 2, 1]


def test_plan_follows_order_on_a_scarce_host() -> None:
    teams = {"a": TeamView("a", usage=1), "b": TeamView("b", usage=0)}
    jobs = [job(1, "a", priority=5), job(2, "b"), job(3, "b", priority=1)]
    p = plan(jobs, [host("h", free={0})], teams, NOW)
    assert [a.job_id for a in p.assignments] == [3]


def test_unknown_team_and_zero_share() -> None:
    teams = {"z": TeamView("z", share=0)}
    assert [j.id for j in order([job(1, "z"), job(2, "new")], teams, NOW)] == [2, 1]


# --- placement ---------------------------------------------------------------------------


def test_whole_host_needs_every_chip_free() -> None:
    p = plan([job(1, chips=None)], [host("busy", free={0, 1, 2}), host("idle")], {}, NOW)
    assert p.assignments == (Assignment(1, "idle", (0, 1, 2, 3)),)


def test_aligned_blocks() -> None:
    # Chips 1 and 2 are free but not an aligned pair; 2 and 3 are.
    p = plan([job(1, chips=2)], [host("h", free={1, 2, 3})], {}, NOW)
    assert p.assignments == (Assignment(1, "h", (2, 3)),)
    p = plan([job(1, chips=2)], [host("h", free={1, 2})], {}, NOW, max_reservations=0)
    assert p.assignments == () and p.waiting[1] == "waiting for 2 free chips"


def test_one_chip_job_keeps_pairs_intact() -> None:
    # Chip 0's buddy (1) is busy: taking 0 keeps the pair 2,3 free for a 2-chip job.
    p = plan([job(1), job(2, chips=2)], [host("h", free={0, 2, 3})], {}, NOW)
    assert set(p.assignments) == {Assignment(1, "h", (0,)), Assignment(2, "h", (2, 3))}


def test_best_fit_prefers_fullest_host() -> None:
    hosts = [host("empty"), host("half", free={2, 3}), host("one", free={3})]
    p = plan([job(1)], hosts, {}, NOW)
    assert p.assignments == (Assignment(1, "one", (3,)),)
    p = plan([job(1, chips=2)], hosts, {}, NOW)
    assert p.assignments == (Assignment(1, "half", (2, 3)),)
    # Across types too: an any-type job goes where the fewest chips are free.
    mixed = [host("v4", free={3}), host("v5", 8, tpu_type="v5litepod-8")]
    assert plan([job(1)], mixed, {}, NOW).assignments == (Assignment(1, "v4", (3,)),)


def test_type_match_and_unschedulable() -> None:
    hosts = [
        host("v5", 8, tpu_type="v5litepod-8"),
        host("v4", tpu_type="v4-8", schedulable=False),
        HostView("unk", None, (0, 1, 2, 3), frozenset({0, 1, 2, 3})),
    ]
    jobs = [job(1, tpu_type="v4-8"), job(2, chips=8, tpu_type="v5litepod-8"), job(3, chips=None)]
    p = plan(jobs, hosts, {}, NOW)
    assert {a.job_id: a.host for a in p.assignments} == {2: "v5", 3: "unk"}
    assert p.waiting[1] == "no host in service: v4 out of service", "the only v4-8 host is out"


def test_a_job_that_cannot_fit_reserves_at_once_and_later_jobs_without_a_limit_wait() -> None:
    jobs = [job(1, chips=None, tpu_type="v4-8", submitted_at=NOW - 200), job(2)]
    p = plan(jobs, [host("h", free={0, 1})], {}, NOW)
    assert p.assignments == () and p.reserved == {"h": 1}
    assert p.waiting[1] == "h reserved for it, start unknown (running jobs there have no " \
                           "time limit)"
    assert p.waiting[2] == "h reserved for job 1"


def test_backfill_only_by_jobs_that_end_before_the_reservation_starts() -> None:
    # chips 2 and 3 are busy until NOW + 3600 (their jobs' time limits)
    h = host("h", free={0, 1}, free_at={2: NOW + 3600, 3: NOW + 1800})
    jobs = [job(1, chips=None, submitted_at=NOW - 200), job(2, time_limit_s=3600.0),
            job(3, time_limit_s=3601.0), job(4)]
    p = plan(jobs, [h], {}, NOW)
    assert p.reserved == {"h": 1}
    assert [a.job_id for a in p.assignments] == [2], "ends by the start: backfills"
    start = time.strftime("%H:%M", time.localtime(NOW + 3600))
    assert p.waiting[1] == f"h reserved for it, starts by {start}"
    assert p.waiting[3] == p.waiting[4] == \
        f"h reserved for job 1; a job whose --time ends by {start} may use it"


def test_a_later_teams_job_backfills_when_only_reserved_chips_are_free() -> None:
    """Teams with no job that can backfill are passed over (their backlogs unsorted);
    a team after them with a limited job still gets the reserved host's free chips."""
    h = host("h", free={0, 1}, free_at={2: NOW + 3600, 3: NOW + 3600})
    teams = {t: TeamView(t, usage=u) for t, u in (("a", 0.0), ("b", 1.0), ("c", 2.0))}
    jobs = [job(1, chips=None), *(job(i, team="b", chips=2) for i in range(2, 40)),
            job(40, team="c", chips=2, time_limit_s=1800.0)]
    p = plan(jobs, [h], teams, NOW)
    assert p.reserved == {"h": 1}
    assert p.assignments == (Assignment(40, "h", (0, 1)),)
    assert p.waiting[2] == "waiting for 2 free chips"


def test_the_reservation_goes_where_the_job_starts_soonest() -> None:
    hosts = [host("slow", free={0, 1, 2}), host("soon", free={0, 1}, free_at={2: NOW + 60,
                                                                            3: NOW + 60})]
    p = plan([job(7, chips=None)], hosts, {}, NOW)
    assert p.reserved == {"soon": 7}, "one busy chip with no limit waits longer than two " \
                                      "that end in a minute"
    assert plan([job(7, chips=None)], hosts, {}, NOW, max_reservations=0).reserved == {}
    assert plan([job(7, chips=None, submitted_at=NOW)], hosts, {}, NOW,
                reserve_after_s=60).reserved == {}


# --- filters and reasons -----------------------------------------------------------------


def test_filter_reasons() -> None:
    jobs = [
        job(2, not_before=NOW + 90),
        job(3, depends_on=(12,)),
        job(4, depends_on=(12, 13, 14)),
        job(5, chips=3),
        job(6, chips=2, tpu_type="v4-8"),
        job(9, chips=None, tpu_type="v9-1"),
        job(10, chips=0),
    ]
    p = plan(jobs, [host("h", free=set())], {}, NOW, succeeded=frozenset({13}))
    backoff = time.strftime("%H:%M:%S", time.localtime(NOW + 90))
    assert dict(p.waiting) == {
        2: f"retry backoff until {backoff}",
        3: "waiting for job 12",
        4: "waiting for jobs 12, 14",
        5: "no host offers 3 chips",
        6: "waiting for 2 free chips on a v4-8 host",
        9: "no host offers a whole v9-1 host",
        10: "no host offers 0 chips",
    }


def test_dependencies_met_run() -> None:
    p = plan([job(3, depends_on=(12,))], [host("h")], {}, NOW, succeeded=frozenset({12}))
    assert [a.job_id for a in p.assignments] == [3]


def test_quota_reasons() -> None:
    resets = NOW + 3 * 86_400
    teams = {
        "full": TeamView("full", running_chips=8, max_chips=8),
        "typed": TeamView("typed", running_by_type={"v4-8": 4}, max_chips_by_type={"v4": 4}),
        "user": TeamView("user", running_by_user={"alice": 2}, max_chips_per_user=2),
        "broke": TeamView("broke", budget_left=0.0, budget_resets_at=resets),
        "old": TeamView("old", grant_expires_at=NOW - 1),
        "est": TeamView("est", budget_left=3.0),
    }
    jobs = [
        job(1, "full"),
        job(2, "typed", tpu_type="v4-8"),
        job(3, "user", user="alice"),
        job(4, "broke"),
        job(5, "old"),
        job(6, "est", chips=2, est_hours=2.0),
    ]
    p = plan(jobs, [host("h")], teams, NOW)
    assert p.assignments == ()
    when = time.strftime("%a %H:%M", time.localtime(resets))
    assert dict(p.waiting) == {
        1: "team full at 8/8 chips",
        2: "team typed at 4/4 v4 chips",
        3: "user alice at 2/2 chips in team user",
        4: f"weekly budget spent, resets {when}",
        5: "grant expired",
        6: "needs 4 chip-hours, 3 left in weekly budget",
    }


def test_quota_sees_earlier_assignments_of_the_pass() -> None:
    teams = {"a": TeamView("a", running_chips=1, max_chips=3, max_chips_per_user=1)}
    jobs = [job(1, user="x"), job(2, user="x"), job(3, user="y"), job(4, user="z")]
    p = plan(jobs, [host("h")], teams, NOW)
    assert [a.job_id for a in p.assignments] == [1, 3]
    assert p.waiting[2] == "team a at 3/3 chips"
    assert p.waiting[4] == "team a at 3/3 chips"


def test_any_type_job_skips_capped_type() -> None:
    teams = {"a": TeamView("a", max_chips_by_type={"v4-8": 0})}
    hosts = [host("v4", free={0}), host("v5", 8, tpu_type="v5litepod-8")]
    p = plan([job(1), job(2, tpu_type="v4-8")], hosts, teams, NOW)
    assert p.assignments == (Assignment(1, "v5", (0,)),)
    assert p.waiting[2] == "team a at 0/0 v4-8 chips"


def test_whole_host_quota_uses_host_size() -> None:
    teams = {"a": TeamView("a", max_chips=4)}
    hosts = [host("big", 8, tpu_type="v5litepod-8"), host("small", tpu_type="v4-8")]
    p = plan([job(1, chips=None), job(2, chips=None)], hosts, teams, NOW)
    assert p.assignments == (Assignment(1, "small", (0, 1, 2, 3)),)
    assert p.waiting[2] == "team a at 4/4 chips"


def test_budget_charged_within_pass() -> None:
    teams = {"a": TeamView("a", budget_left=5.0)}
    p = plan([job(1, est_hours=4.0), job(2, est_hours=4.0)], [host("h")], teams, NOW)
    assert [a.job_id for a in p.assignments] == [1]
    assert p.waiting[2] == "needs 4 chip-hours, 1 left in weekly budget"


def test_waiting_mapping_covers_everything_else() -> None:
    jobs = [job(i) for i in range(1, 8)]
    p = plan(jobs, [host("h")], {}, NOW)
    assert len(p.assignments) == 4 and len(p.waiting) == 3
    assert set(p.waiting) == {5, 6, 7} and 1 not in p.waiting
    assert set(p.waiting.values()) == {"waiting for 1 free chip"}
    with pytest.raises(KeyError):
        p.waiting[1]


def test_empty_inputs() -> None:
    assert plan([], [], {}, NOW).assignments == ()
    p = plan([job(1)], [], {}, NOW)
    assert p.waiting == {1: "no host offers 1 chip"}


def test_a_job_only_out_of_service_hosts_could_take_says_which_and_why() -> None:
    hosts = [host("a", schedulable=False, out_of_service="draining"),
             host("b", schedulable=False, out_of_service="busy: TPU held by pid 7 (python)"),
             host("c", 8, tpu_type="v5litepod-8", schedulable=False,
                  out_of_service="agent stopped")]
    p = plan([job(1), job(2, chips=None, tpu_type="v5litepod-8")], hosts, {}, NOW)
    assert p.waiting[1] == "no host in service: a draining; b busy: TPU held by pid 7 " \
                           "(python); c agent stopped"
    assert p.waiting[2] == "no host in service: c agent stopped"
    # one host in service, busy: the job waits for chips, not for a host
    p = plan([job(1)], [*hosts, host("d", free=set())], {}, NOW)
    assert p.waiting[1] == "waiting for 1 free chip"


# --- a job whose checkpoints are on one host's disk --------------------------------------


def test_a_job_goes_back_to_the_host_holding_its_checkpoints() -> None:
    """Best fit would pick the fuller host; the one with the checkpoints wins."""
    hosts = [host("a", free={1, 2, 3}), host("b")]
    p = plan([job(1, home="b", home_until=NOW + 60)], hosts, {}, NOW)
    assert [(x.job_id, x.host) for x in p.assignments] == [(1, "b")]
    p = plan([job(1)], hosts, {}, NOW)
    assert [(x.job_id, x.host) for x in p.assignments] == [(1, "a")], "best fit otherwise"


def test_it_waits_for_that_host_while_it_is_expected_back_then_goes_elsewhere() -> None:
    down = host("b", schedulable=False, out_of_service="lost: its leases ran out")
    waiting = job(1, home="b", home_until=NOW + 60)
    p = plan([waiting], [host("a"), down], {}, NOW)
    assert not p.assignments
    assert p.waiting[1].startswith("waiting for b, which holds its checkpoints (until ")
    p = plan([waiting], [host("a"), down], {}, NOW + 61)
    assert [(x.job_id, x.host) for x in p.assignments] == [(1, "a")], "the wait is bounded"
    busy = host("b", free=set())
    p = plan([waiting], [host("a"), busy], {}, NOW)
    assert not p.assignments, "its host is up but full: it waits for chips there"


def test_a_host_that_is_gone_or_draining_is_not_waited_for() -> None:
    waiting = job(1, home="b", home_until=NOW + 60)
    p = plan([waiting], [host("a")], {}, NOW)
    assert [x.host for x in p.assignments] == ["a"], "forgotten: nothing to wait for"
    draining = host("b", schedulable=False, out_of_service="draining", draining=True)
    p = plan([waiting], [host("a"), draining], {}, NOW)
    assert [x.host for x in p.assignments] == ["a"]


def test_waiting_for_its_host_leaves_the_others_to_the_rest() -> None:
    down = host("b", schedulable=False, out_of_service="lost")
    p = plan([job(1, home="b", home_until=NOW + 60), job(2)], [host("a"), down], {}, NOW)
    assert [(x.job_id, x.host) for x in p.assignments] == [(2, "a")]
