"""Failover across hosts: a host that stops answering gets no work until it is heard from,
and a handed-over host's jobs wait a stated time for a new agent.

Team deployment, short leases (the harness's 3 s); `TPUQ_HOST_STALE_S` is long on
purpose, so only the lost leases can keep work away from a dead host.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.harness import FakeHost, Stack, wait_for
from tpuq.state.models import Attempt

pytestmark = pytest.mark.team

SLOW_STALE = {"TPUQ_HOST_STALE_S": "120"}  # a dead host's heartbeat still looks fresh


def kill_host(stack: Stack, host: FakeHost, attempt: Attempt) -> None:
    """The host dies: its agent, its keepers and the job's process group."""
    next(a for a in stack.agents if a.host is host).kill()
    stack.kill_keepers(host)
    try:
        os.killpg(attempt.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def host_state(stack: Stack, name: str) -> str:
    lines = [ln for ln in stack.tpuq("status", COLUMNS="200").stdout.splitlines()
             if ln.startswith(f"{name} ")]
    return lines[0] if lines else ""


def test_a_dead_hosts_job_runs_elsewhere_and_the_host_gets_nothing_until_heard_from(
        team_stack, tmp_path):
    """Best fit would put a 1-chip job on the 4-chip host again (fewer free chips than
    the 8-chip one): once its agent stopped renewing, it gets nothing until it beats."""
    team_stack.extra.update(SLOW_STALE)
    big = FakeHost(tmp_path / "big", name="tpu-big", chips=8)
    small = FakeHost(tmp_path / "small", name="tpu-small", chips=4)
    agent_small = team_stack.start_agent(small)
    job = team_stack.submit("--chips", "1", "--", "sleep", "600")
    first = team_stack.wait_process(job)
    assert first.host == "tpu-small"
    team_stack.start_agent(big)
    kill_host(team_stack, small, first)
    moved = wait_for(lambda: (a := team_stack.attempts(job)[-1]).host == "tpu-big"
                     and a.pid and a, 30, "the job to run on the surviving host",
                     on_timeout=lambda: repr([(a.number, a.host, a.outcome)
                                              for a in team_stack.attempts(job)]))
    assert [a.host for a in team_stack.attempts(job)] == ["tpu-small", "tpu-big"], \
        "never given to the dead host again"
    assert moved.number == 2 and team_stack.attempts(job)[0].outcome == "lost"
    assert "lost: its leases ran out; no work until it is heard from" in \
        host_state(team_stack, "tpu-small")
    # heard from again: it takes work as before (best fit picks it)
    agent_small.start()
    wait_for(lambda: "ok" in host_state(team_stack, "tpu-small").split(), 30,
             "the host back in service", on_timeout=lambda: host_state(team_stack, "tpu-small"))
    other = team_stack.submit("--chips", "1", "--", "/bin/true")
    assert team_stack.wait_state(other, "succeeded").host == "tpu-small"


def test_a_handed_over_job_waits_for_a_new_agent_then_runs_elsewhere(team_stack, tmp_path):
    """SIGUSR2 and no new agent (it cannot start: an upgrade gone wrong). The job runs on
    past its lease for TPUQ_HANDOVER_S, its host takes no new work meanwhile, then its
    keeper stops it and it runs on the other host: never on the silent one again."""
    window = 8.0
    a = FakeHost(tmp_path / "a", name="tpu-a", chips=4)
    b = FakeHost(tmp_path / "b", name="tpu-b", chips=4)
    agent_a = team_stack.start_agent(a, TPUQ_HANDOVER_S=str(window))
    job = team_stack.submit("--", "sleep", "600")
    first = team_stack.wait_process(job)
    assert first.host == "tpu-a"
    agent_a.proc.send_signal(signal.SIGUSR2)
    assert agent_a.proc.wait(30) == 0
    handed = team_stack.host("tpu-a")
    assert handed.stopped_at is not None and handed.handover_until is not None
    assert team_stack.job(job).lease_expires_at >= handed.stopped_at + window - 1.0
    assert "handed over: its jobs wait for a new agent" in host_state(team_stack, "tpu-a")
    team_stack.start_agent(b)
    moved = wait_for(lambda: (at := team_stack.attempts(job)[-1]).host == "tpu-b"
                     and at.pid and at, 60, "the job to run on the other host")
    ended = team_stack.attempts(job)[0]
    assert [at.host for at in team_stack.attempts(job)] == ["tpu-a", "tpu-b"]
    assert ended.outcome == "lost" and "keeper" in (ended.reason or ""), ended.reason
    lease_s = 3.0  # the harness's: the old keeper stopped the job within it
    assert ended.ended_at > handed.stopped_at + lease_s + 1.0, "it waited the window"
    assert moved.number == 2
