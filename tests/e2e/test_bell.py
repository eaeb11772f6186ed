"""A machine with no agent rings the agents through the database: a submit from such a
machine starts although every agent's scheduler polls only hourly, and it needs neither
Celery nor a broker connection (nor any broker account) to do it, nor SQLAlchemy: a plain
submit is written with psycopg alone (state/pgsubmit.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.e2e.test_team import LAPTOP
from tests.harness import TPUQ


def test_a_submit_from_a_machine_without_an_agent_rings_through_the_database(
        team_stack, host):
    team_stack.start_agent(host, TPUQ_POLL_S="3600")  # only a wake-up makes it schedule
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", *TPUQ[1:], "submit", "-q", "--", "/bin/true"],
        env=team_stack.env(**LAPTOP, TPUQ_BROKER_URL=""), capture_output=True, text=True,
        timeout=60)
    assert traced.returncode == 0, traced.stderr
    modules = {line.rsplit("|", 1)[-1].strip() for line in traced.stderr.splitlines()}
    assert "psycopg" in modules and not {"celery", "kombu", "redis", "sqlalchemy"} & modules
    team_stack.wait_state(int(traced.stdout.split()[-1]), "succeeded", timeout=30)
