"""What the start forecast reads: who holds which chips until when, and how much of
their time limit each owner's jobs use."""

from __future__ import annotations

import time

from sqlalchemy import insert, update

from tests.state.rows import register_host
from tpuq.spec import JobSpec
from tpuq.state import holdings, jobs
from tpuq.state.db import SCHEMA_HEAD
from tpuq.state.models import Allocation, Attempt, Job


def job(s, owner: str, limit: float) -> int:  # type: ignore[no-untyped-def]
    spec = JobSpec(command=["true"], cwd="/", env={}, owner=owner, team="t", grace_s=1.0,
                   time_limit_s=limit).validate()
    return jobs.submit(s, spec, actor=owner)


def test_an_owners_share_of_the_limit_and_the_expected_ends(db) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    with db.write() as s:
        register_host(s, "h")
        for run in (250.0, 750.0, 500.0):
            j = job(s, "bob", 1000.0)
            s.execute(insert(Attempt).values(job_id=j, number=1, host="h", chips=[0],
                                             code_revision=SCHEMA_HEAD,
                                             assigned_at=now - 2000, started_at=now - 2000,
                                             ended_at=now - 2000 + run, outcome="succeeded"))
        running = job(s, "bob", 1000.0)
        s.execute(update(Job).where(Job.id == running).values(state="running", attempt=1, host="h"))
        s.execute(insert(Attempt).values(job_id=running, number=1, host="h", chips=[2, 3],
                                         code_revision=SCHEMA_HEAD,
                                         assigned_at=now - 100, started_at=now - 100))
        s.execute(insert(Allocation), [{"host": "h", "chip": c, "job_id": running, "attempt": 1}
                                       for c in (2, 3)])
    with db.read() as s:
        share = holdings.shares(s)
        assert share == {"bob": 0.5}
        (held,) = list(holdings.held(s, share))
        assert held[:6] == (running, "t", "bob", "h", "v4-8", [2, 3])
        assert abs(held[6] - (now - 100 + 500)) < 1e-3  # half of its limit, as bob's do
        (full,) = list(holdings.held(s))
        assert abs(full[6] - (now - 100 + 1000)) < 1e-3  # without history: its limit
