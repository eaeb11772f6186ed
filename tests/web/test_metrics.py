"""/metrics: the names, types and labels are pinned (dashboards and alerts are written
against them), and the numbers are what the database holds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from sqlalchemy import insert, update

from tests.state.rows import register_host
from tests.web.conftest import spec
from tests.web.metrics_golden import GOLDEN
from tpuq.state import jobs, leader, teams, usage
from tpuq.state.db import SCHEMA_HEAD, Database
from tpuq.state.models import Attempt, Host, Job, Leader, Notification
from tpuq.web import metrics
from tpuq.web.metrics import TpuqCollector

HOUR = 3600.0


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" \
        else f"sqlite:///{tmp_path}/t.db"
    d = Database(url)
    d.upgrade()
    yield d
    d.dispose()


def scrape(collector: TpuqCollector) -> dict[str, Any]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    for f in families.values():
        for s in f.samples:
            if s.name == sample and s.labels == labels:
                return float(s.value)
    raise AssertionError(f"no sample {sample}{labels}")


def attempt(s: Any, job_id: int, number: int, *, chips: int, assigned: float,
            started: float | None, ended: float | None, outcome: str | None,
            reason: str = "", checkpoint: float | None = None, host: str = "tpu-a") -> None:
    s.execute(insert(Attempt).values(
        job_id=job_id, number=number, host=host, chips=list(range(chips)), assigned_at=assigned,
        started_at=started, ended_at=ended, outcome=outcome, reason=reason,
        checkpoint_at=checkpoint, code_revision=SCHEMA_HEAD))
    s.execute(update(Job).where(Job.id == job_id).values(attempt=number))


def test_names_types_and_labels_are_pinned(db: Database) -> None:
    with db.write() as s:  # every labelled series has a sample: a budget, a host, a start
        teams.set_quota(s, "ml", budget_chip_hours=100.0)
        register_host(s, "tpu-a")
        job_id = jobs.submit(s, spec("alice"), actor="alice")
        attempt(s, job_id, 1, chips=4, assigned=time.time() - 9, started=time.time() - 5,
                ended=None, outcome=None)
    families = scrape(TpuqCollector(db, 30.0))
    shown = {}
    for name, f in families.items():
        labels = {k for s in f.samples for k in s.labels if k not in ("le", "quantile")}
        shown[name] = (f.type, tuple(sorted(labels)))
    assert shown == GOLDEN


def test_the_numbers_are_the_databases(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    old = now - 10 * HOUR  # settled: folded into the cache
    with db.write() as s:
        for name in ("tpu-a", "tpu-b", "tpu-c", "tpu-d", "tpu-e"):
            register_host(s, name)
        s.execute(update(Host).where(Host.name == "tpu-b").values(draining=True))
        s.execute(update(Host).where(Host.name == "tpu-c").values(
            busy_reason="notice: maintenance-event TERMINATE_ON_HOST_MAINTENANCE"))
        s.execute(update(Host).where(Host.name == "tpu-d").values(busy_reason="pid 7 (bob)"))
        s.execute(update(Host).where(Host.name == "tpu-e").values(heartbeat_at=now - 3600))
        a = jobs.submit(s, spec("alice"), actor="alice")
        b = jobs.submit(s, spec("bob", team="vision"), actor="bob")
        jobs.hold(s, b, "bob")
        # job a: preempted by maintenance after a checkpoint, resumed 30 s later, then ran
        # to success; 4 chips
        attempt(s, a, 1, chips=4, assigned=old - 60, started=old, ended=old + 1000,
                outcome="preempted", checkpoint=old + 800,
                reason="preempted (host notice: maintenance-event MIGRATE); exit 0")
        attempt(s, a, 2, chips=4, assigned=old + 1010, started=old + 1030,
                ended=old + 2030, outcome="succeeded")
        s.execute(update(Job).where(Job.id == a).values(state="succeeded", submitted_at=old - 100))
        # job c: lost its host a minute ago (not settled: read fresh every scrape)
        c = jobs.submit(s, spec("carol"), actor="carol")
        s.execute(update(Job).where(Job.id == c).values(submitted_at=now - 300))
        attempt(s, c, 1, chips=2, assigned=now - 200, started=now - 190, ended=now - 60,
                outcome="lost", reason="lease expired: host tpu-a stopped answering")
        s.execute(insert(Notification).values(job_id=c, event="failed", created_at=now,
                                               state="failed", next_at=now, tries=8))
        teams.set_quota(s, "ml", budget_chip_hours=100.0, budget_period="month")
        s.execute(insert(Leader).values(role=leader.SCHEDULER, holder="h", expires_at=now + 6,
                                        pass_count=10, pass_seconds_sum=0.5,
                                        pass_seconds_last=0.04))
    first = scrape(TpuqCollector(db, 30.0))
    monkeypatch.setattr(metrics, "SETTLE_S", 0.0)  # everything settled: cache path only
    collector = TpuqCollector(db, 30.0)
    scrape(collector)
    again = scrape(collector)
    for f in (first, again):
        assert value(f, "tpuq_up") == 1.0
        assert value(f, "tpuq_jobs", team="vision", state="held") == 1
        assert value(f, "tpuq_jobs", team="ml", state="queued") == 1  # job c, requeued
        for state, n in (("ok", 1), ("draining", 1), ("notice", 1), ("busy", 1), ("silent", 1)):
            assert value(f, "tpuq_hosts", state=state) == n, state
        assert value(f, "tpuq_chips", tpu_type="v4-8", state="free") == 4
        assert value(f, "tpuq_chips", tpu_type="v4-8", state="out_of_service") == 16
        assert value(f, "tpuq_preemptions_total", cause="maintenance") == 1
        assert value(f, "tpuq_preemptions_total", cause="host_lost") == 1
        assert value(f, "tpuq_lost_work_chip_seconds_total", cause="maintenance") == 4 * 200
        assert value(f, "tpuq_lost_work_chip_seconds_total", cause="host_lost") == 2 * 130
        assert value(f, "tpuq_resume_seconds_count") == 1
        assert value(f, "tpuq_resume_seconds_sum") == pytest.approx(30)
        assert value(f, "tpuq_resume_seconds_bucket", le="30") == 1
        assert value(f, "tpuq_resume_seconds_bucket", le="15") == 0
        assert value(f, "tpuq_job_wait_seconds_count", team="ml") == 2  # a's and c's first
        assert value(f, "tpuq_job_wait_seconds_sum", team="ml") == pytest.approx(100 + 110)
        allocated = 4 * 1060 + 4 * 1020 + 2 * 140
        useful = 4 * 800 + 4 * 1000
        assert value(f, "tpuq_allocated_chip_seconds_total") == pytest.approx(allocated)
        assert value(f, "tpuq_useful_chip_seconds_total") == pytest.approx(useful)
        assert value(f, "tpuq_goodput_ratio") == pytest.approx(useful / allocated)
        assert value(f, "tpuq_notifications_failed_total") == 1
        assert value(f, "tpuq_scheduler_pass_seconds_count") == 10
        assert value(f, "tpuq_scheduler_last_pass_seconds") == pytest.approx(0.04)
        # charged (usage.py's rule): a's second attempt; the preempted and lost ones not
        assert value(f, "tpuq_team_burn_chip_hours_per_day", team="ml") == \
            pytest.approx(4 * 1000 / 3600)
        assert value(f, "tpuq_team_budget_chip_hours", team="ml", period="month") == 100
        with db.read() as s:  # the same use as `tpuq quota` reports
            (ml,) = [r for r in usage.report(s, 168.0) if r["team"] == "ml"]
        assert value(f, "tpuq_team_used_chip_hours", team="ml", period="month") == \
            pytest.approx(ml["used_chip_hours"], abs=1e-3)


def test_health_drops_when_the_database_cannot_be_read() -> None:
    gone = Database("postgresql://postgres@127.0.0.1:1/nothing")
    try:
        families = scrape(TpuqCollector(gone, 30.0))
    finally:
        gone.dispose()
    assert value(families, "tpuq_up") == 0.0
    assert "tpuq_jobs" not in families  # no numbers that were not read
