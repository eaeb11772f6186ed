"""Failover across hosts: a host that stops answering gets no work until it is heard from,
and a handed-over host's jobs wait a stated time for a new agent.

Team deployment, short leases (the harness's 3 s); `TPUQ_HOST_STALE_S` is long on
purpose, so only the lost leases can keep work away from a dead host.
"""

from __future__ import annotations

import os
import signal

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


def test_a_gang_whose_worker_lost_its_agent_stops_at_once_and_resumes_bit_identical(
        team_stack, tmp_path):
    """Four workers train together (jax.distributed on CPU); worker 2's agent is killed.
    Its keeper stops its process when the lease runs out; worker 0 sees the loss within
    a second and the other three get a short stop (TPUQ_GANG_STOP_S), not their grace
    (600 s here: no save can complete without worker 2 anyway). The job is requeued,
    uncharged, every worker's row says how it ended, and once worker 2's agent is back
    the job resumes from its last checkpoint and ends with the very bytes of an
    uninterrupted run."""
    from tests.e2e.test_slices import TYPE, start_slice, start_worker, workers
    from tests.harness import fixture_cmd
    from tests.services import free_port

    steps = "150"
    env = {"TPUQ_COORDINATOR_PORT": str(free_port())}
    hosts = start_slice(team_stack, tmp_path, **env)
    ref, out = tmp_path / "ref", tmp_path / "out"
    ref.mkdir()
    out.mkdir()
    clean = team_stack.submit("--tpu-type", TYPE, *fixture_cmd("jax_gang_train.py", ref, steps))
    team_stack.wait_state(clean, "succeeded", timeout=180)
    job = team_stack.submit("--tpu-type", TYPE, "--grace", "600",
                            *fixture_cmd("jax_gang_train.py", out, steps))
    wait_for(lambda: int((out / "step.1").read_text() or 0) >= 25
             if (out / "step.1").exists() else False, 120, "25 steps of the first attempt")
    team_stack.agents[2].kill()
    wait_for(lambda: team_stack.job(job).attempt > 1 or team_stack.job(job).state == "queued",
             90, "the gang requeued, well within its 600 s grace",
             on_timeout=lambda: repr([(g.worker, g.state, g.outcome, g.reason)
                                      for g in workers(team_stack, job)]))
    first = team_stack.attempts(job)[0]
    assert first.outcome == "lost" and "worker 2 (pod-a-w2) lost" in (first.reason or "")
    assert team_stack.job(job).failures == 0
    rows = {g.worker: g for g in workers(team_stack, job) if g.attempt == 1}
    assert all(g.state == "ended" and g.ended_at for g in rows.values()), \
        [(g.worker, g.state) for g in rows.values()]
    assert rows[2].outcome == "lost", "the lost worker's row says so"
    # each of the others either was stopped with the gang (preempted: tpuq signalled it,
    # and its reason says so) or saved and exited 75 by itself first (requeued): worker
    # 2's keeper signals its process when the lease runs out, and JAX's preemption
    # service turns a stop signal on any worker into a sync point every worker reaches
    # (the fixture then saves and exits 75), so on a loaded machine a worker can end on
    # its own before the gang's stop reaches it. Never a failure.
    for w in (0, 1, 3):
        outcome, reason = rows[w].outcome, rows[w].reason or ""
        assert (outcome == "preempted" and "stopped with the gang" in reason) or \
            (outcome == "requeued" and "exited with code 75" in reason), (w, outcome, reason)
    start_worker(team_stack, hosts[2], 2, tmp_path, **env)
    team_stack.wait_state(job, "succeeded", timeout=180)
    resumed = int((out / f"resumed.{team_stack.job(job).attempt}").read_text())
    assert resumed >= 20, "it resumed from its checkpoint, not from the start"
    assert (out / "final").read_text() == (ref / "final").read_text()


def test_a_gang_whose_worker_host_died_gets_a_short_stop_not_its_grace(team_stack, tmp_path):
    """Worker 2's host dies (agent, keeper and process): the other three, deaf to their
    stop signal as JAX's preemption service is while a peer is dead, are killed
    TPUQ_GANG_STOP_S after it, not after their 600 s grace, and the job is requeued,
    uncharged. A hung collective cannot save; the grace would buy nothing."""
    from tests.e2e.test_slices import TYPE, start_slice, started, workers
    from tests.harness import fixture_cmd

    out = tmp_path / "out"
    out.mkdir()
    hosts = start_slice(team_stack, tmp_path, TPUQ_GANG_STOP_S="1")
    job = team_stack.submit("--tpu-type", TYPE, "--grace", "600",
                            *fixture_cmd("gang_task.py", out, "deaf"))
    wait_for(lambda: len(started(out)) == 4 and all(g.pid for g in workers(team_stack, job)),
             60, "every worker to run")
    victim = workers(team_stack, job)[2]
    team_stack.agents[2].kill()
    team_stack.kill_keepers(hosts[2])
    os.killpg(victim.pid, signal.SIGKILL)
    wait_for(lambda: team_stack.job(job).state == "queued" or team_stack.job(job).attempt > 1,
             60, "the gang requeued, well within its grace")
    assert sorted(p.name for p in out.glob("term.1.*")) == ["term.1.0", "term.1.1", "term.1.3"]
    rows = {g.worker: g for g in workers(team_stack, job) if g.attempt == 1}
    assert [rows[w].exit_signal for w in (0, 1, 3)] == [9, 9, 9], "killed after the short stop"
    assert (rows[2].state, rows[2].outcome) == ("ended", "lost")
    first = team_stack.attempts(job)[0]
    assert first.outcome == "lost" and "worker 2 (pod-a-w2) lost" in (first.reason or "")
    assert team_stack.job(job).failures == 0


def test_logs_of_an_attempt_lost_before_it_started_tell_one_story(team_stack, tmp_path):
    """Attempt 1 was assigned to a host that never started it; its lease ran out and
    attempt 2 ran elsewhere. `tpuq logs -f` from another machine says once what became
    of attempt 1, as `show` does, and names no log file it never had."""
    from tpuq.state import attempts, leader

    with team_stack.db.write() as s:  # the test leads, to assign where nobody listens
        assert leader.acquire(s, leader.SCHEDULER, "the-test", 600)
    team_stack.start_agent(FakeHost(tmp_path / "a", name="tpu-a", chips=4))
    job = team_stack.submit("--", "sh", "-c", "echo second")
    with team_stack.db.write() as s:
        assert attempts.assign(s, job, 0, "tpu-ghost", [0, 1, 2, 3], lease_s=1) == 1
        leader.release(s, leader.SCHEDULER, "the-test")
    team_stack.wait_state(job, "succeeded", timeout=60)
    first = team_stack.attempts(job)[0]
    assert first.outcome == "lost" and first.started_at is None
    r = team_stack.tpuq("logs", str(job), "-f", TPUQ_HOST="laptop",
                        TPUQ_AGENT_SOCKET="/nonexistent/agent.sock")
    assert r.stdout.endswith("second\n")
    assert "None" not in r.stderr and "not in Redis" not in r.stderr, r.stderr
    assert (f"tpuq: attempt 1 wrote nothing: lost before it started: {first.reason}"
            in r.stderr), r.stderr
