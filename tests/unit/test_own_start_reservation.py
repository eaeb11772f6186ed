"""A start the leader's pass begins on its own host (Executor.begin_start) holds the
attempt until the pass's transaction ends: no other start of it, no shape probe beside
it, and nothing left held once the transaction is let go."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from tpuq.agent.attempts.executor import Executor
from tpuq.agent.tpu.devices import Chip
from tpuq.settings import Settings
from tpuq.spec import JobSpec
from tpuq.state import attempts, hosts, jobs
from tpuq.state.db import Database
from tpuq.state.models import Job


def test_a_begun_start_holds_the_attempt_until_its_transaction_ends(tmp_path: Path) -> None:
    device = tmp_path / "accel0"
    device.touch()
    cfg = Settings(home=str(tmp_path / "home"), host="tpu-a")
    db = Database(cfg.db_url)
    db.upgrade()
    held = hosts.Held("tpu-a", "x")
    ex = Executor(cfg, db, held, boot_id="b", chips=[Chip(0, (str(device),))], tpu_type=None,
                  on_change=lambda: None)
    try:
        with db.write() as s:
            hosts.register(s, held, hosts.AgentHome("m", "/h"), tpu_type=None, chips=[0],
                           boot_id="b", agent_pid=1, stale_s=30.0)
            job = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t"))
            assert attempts.assign(s, job, 0, "tpu-a", [0], 60.0) == 1
        with db.write() as s:
            token = ex.begin_start(s, job, 1)
            assert token is not None
            assert s.execute(select(Job.state).where(Job.id == job)).scalar_one() == "running"
            assert ex.begin_start(s, job, 1) is None, "begun once"
            assert ex.start_attempt(job, 1) is None, "a doorbell meanwhile starts nothing"
            assert not ex.begin_probe(), "no shape probe beside a start in flight"
            s.rollback()  # the pass did not commit: its start did not happen
            ex.abandon_start(token)
        with db.read() as s:
            assert s.execute(select(Job.state).where(Job.id == job)).scalar_one() == "assigned"
        assert ex.begin_probe(), "nothing is held any more"
        ex.end_probe()
    finally:
        ex.devwatch.close()
