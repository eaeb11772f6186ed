"""When will it start: the scheduler's plan run forward in time (scheduler/forecast.py)."""

from __future__ import annotations

from tpuq.scheduler.forecast import NO_LIMIT_WORDS, Holding, expected_starts
from tpuq.scheduler.views import HostView, JobView

NOW = 1_000_000.0
H = 3600.0


def host(name: str, busy: tuple[int, ...] = (), chips: int = 4) -> HostView:
    return HostView(name=name, tpu_type="v4-8", chips=tuple(range(chips)),
                    free=frozenset(range(chips)) - set(busy))


def job(id: int, chips: int | None = None, limit: float | None = None, **kw: object) -> JobView:
    fields: dict[str, object] = {"team": "ml", "user": "alice", "priority": 0,
                                 "submitted_at": NOW - 100 + id, **kw}
    return JobView(id=id, chips=chips, tpu_type="v4-8", time_limit_s=limit,
                   **fields)  # type: ignore[arg-type]


def holding(job_id: int, host_name: str, chips: tuple[int, ...], ends: float | None) -> Holding:
    return Holding(job_id, "ml", "bob", host_name, frozenset(chips), "v4-8", ends)


def test_queued_jobs_start_as_the_running_ones_reach_their_ends() -> None:
    hosts = [host("a", (0, 1, 2, 3)), host("b", (0, 1, 2, 3))]
    held = [holding(1, "a", (0, 1, 2, 3), NOW + H), holding(2, "b", (0, 1, 2, 3), NOW + 2 * H)]
    out = expected_starts([job(10, limit=3 * H), job(11, limit=H)], hosts, {}, held, NOW)
    assert out[10].at == NOW + H
    assert out[11].at == NOW + 2 * H
    assert (out[10].position, out[11].position) == (1, 2)


def test_a_free_host_means_now() -> None:
    out = expected_starts([job(10, chips=1)], [host("a")], {}, [], NOW)
    assert out[10].at == NOW


def test_no_estimate_behind_a_job_without_a_time_limit_and_it_says_so() -> None:
    out = expected_starts([job(10)], [host("a", (0, 1, 2, 3))], {},
                          [holding(1, "a", (0, 1, 2, 3), None)], NOW)
    assert out[10].at is None
    assert NO_LIMIT_WORDS in out[10].why
    assert "waiting for a free v4-8 host" in out[10].why  # the scheduler's own reason


def test_a_short_job_backfills_before_a_reserved_host_frees() -> None:
    # chips 0-1 busy for 2 h: the whole-host job reserves host a; a 1-hour 2-chip job
    # fits in the free half before then, a 3-hour one does not
    hosts = [host("a", (0, 1))]
    held = [holding(1, "a", (0, 1), NOW + 2 * H)]
    jobs = [job(10, limit=H * 5), job(11, chips=2, limit=H), job(12, chips=2, limit=3 * H)]
    out = expected_starts(jobs, hosts, {}, held, NOW)
    assert out[11].at == NOW  # backfilled now
    assert out[10].at == NOW + 2 * H  # its reservation's start: the backfill ends by then
    assert out[12].at == NOW + 7 * H  # after the whole-host job's limit


def test_a_dependent_job_starts_once_what_it_waits_for_ends() -> None:
    hosts = [host("a", (0,)), host("b")]
    held = [holding(1, "a", (0,), NOW + H)]
    out = expected_starts([job(10, chips=1, depends_on=(1,))], hosts, {}, held, NOW)
    assert out[10].at == NOW + H


def test_priority_orders_the_queue() -> None:
    hosts = [host("a", (0, 1, 2, 3))]
    held = [holding(1, "a", (0, 1, 2, 3), NOW + H)]
    out = expected_starts([job(10, limit=H), job(11, limit=H, priority=5)], hosts, {}, held, NOW)
    assert out[11].position == 1 and out[11].at == NOW + H
    assert out[10].at == NOW + 2 * H


def test_a_users_habit_of_finishing_early_brings_the_start_forward() -> None:
    # bob's jobs use half their limit: the 4-hour job ahead is taken to end after 2 hours
    hosts = [host("a", (0, 1, 2, 3))]
    held = [holding(1, "a", (0, 1, 2, 3), NOW + H)]
    jobs = [job(10, limit=4 * H, user="bob"), job(11, limit=H)]
    out = expected_starts(jobs, hosts, {}, held, NOW, share_of_limit={"bob": 0.5})
    assert out[10].at == NOW + H
    assert out[11].at == NOW + 3 * H


def test_a_slice_job_holds_every_worker_it_starts_on() -> None:
    """Two 2-worker v4-16 slices, one busy for two hours: the first slice job starts now
    for an hour; the second, in retry backoff for half an hour, starts when the first
    ends, not as soon as its backoff does (the first holds both its workers)."""
    def worker(name: str, sl: str, n: int, busy: tuple[int, ...] = ()) -> HostView:
        return HostView(name=name, tpu_type="v4-8", chips=(0, 1, 2, 3),
                        free=frozenset((0, 1, 2, 3)) - set(busy), slice=sl, worker=n,
                        slice_type="v4-16")
    all_chips = (0, 1, 2, 3)
    hosts = [worker("s1-0", "s1", 0), worker("s1-1", "s1", 1),
             worker("s2-0", "s2", 0, all_chips), worker("s2-1", "s2", 1, all_chips)]
    held = [holding(1, "s2-0", all_chips, NOW + 2 * H), holding(1, "s2-1", all_chips, NOW + 2 * H)]
    first = JobView(id=10, team="ml", user="alice", priority=0, submitted_at=NOW - 10,
                    chips=None, tpu_type="v4-16", workers=2, time_limit_s=H)
    second = JobView(id=11, team="ml", user="alice", priority=0, submitted_at=NOW - 5,
                     chips=None, tpu_type="v4-16", workers=2, time_limit_s=H,
                     not_before=NOW + H / 2)
    out = expected_starts([first, second], hosts, {}, held, NOW)
    assert out[10].at == NOW
    assert out[11].at == NOW + H
