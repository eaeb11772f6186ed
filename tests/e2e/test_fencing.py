"""A job's process never outlives its right to run, and a host name has one holder.

Faults a host really meets: its agent frozen past its lease (SIGSTOP), cut off from the
database, killed and never restarted, killed while a job finishes; an agent started
under a live host's name; a scheduler leader that stops or dies. Each check reads what
the jobs themselves recorded (tests/records.py) as well as the database.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tests import records
from tests.harness import FIXTURES, AgentProc, FakeHost, Stack, fixture_cmd, wait_for
from tests.services import TcpProxy
from tpuq.agent.tpu.holders import is_same_process
from tpuq.scheduler.passes import ROLE
from tpuq.state import hosts, leader, queries

CHIPS = 4


def fault_job(stack: Stack, out: Path, seconds: float, *more: str, **env: str) -> int:
    return stack.submit("--max-retries", "5", *more, "--", sys.executable,
                        str(FIXTURES / "fault_job.py"), str(out), str(seconds), str(CHIPS),
                        **env)


def two_hosts(tmp_path: Path) -> tuple[FakeHost, FakeHost]:
    return (FakeHost(tmp_path / "host-0", name="tpu-0", chips=CHIPS),
            FakeHost(tmp_path / "host-1", name="tpu-1", chips=CHIPS))


def leader_of(stack: Stack) -> str | None:
    with stack.db.read() as s:
        return leader.current(s, ROLE)


def running_on(stack: Stack, job_id: int, host: str, attempt: int | None):  # type: ignore[no-untyped-def]
    """The attempt running on `host` once it runs there: attempt `attempt`, or (None) any
    after the first."""
    def check():  # type: ignore[no-untyped-def]
        job = stack.job(job_id)
        atts = stack.attempts(job_id)
        right = job.attempt > 1 if attempt is None else job.attempt == attempt
        return job.state == "running" and job.host == host and right \
            and atts[-1].pid and atts[-1]
    try:
        return wait_for(check, 60, f"job {job_id} attempt {attempt or '2 or later'} to run "
                                   f"on {host}")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{stack.diagnose()}") from None


# ---- the job side: fenced by its keeper ----------------------------------------------------

@pytest.mark.team
def test_a_frozen_agents_job_stops_before_its_lease_ends_and_runs_once_elsewhere(
        team_stack, tmp_path):
    """SIGSTOP of host A's agent past its lease: A's keeper stops the job before the
    lease can run out, the job is requeued to B, and A, thawed, writes nothing over it."""
    a, b = two_hosts(tmp_path)
    agent_a = team_stack.start_agent(a)
    out = tmp_path / "runs.txt"
    job_id = fault_job(team_stack, out, 8.0)
    first = running_on(team_stack, job_id, "tpu-0", 1)
    team_stack.start_agent(b)
    os.kill(agent_a.pid, signal.SIGSTOP)
    try:
        # The job's lease (3 s) runs out before A looks dead (5 s): the attempt after the
        # first may go to A again, frozen still, and be lost in its turn before B runs it
        elsewhere = running_on(team_stack, job_id, "tpu-1", None)
        assert not is_same_process(first.pid, first.proc_start), "fenced before the requeue"
    finally:
        os.kill(agent_a.pid, signal.SIGCONT)
    team_stack.wait_state(job_id, "succeeded", timeout=60)
    records.check_promises(out, team_stack.db, [job_id])
    one = team_stack.attempts(job_id)[0]
    assert one.outcome == "lost" and records.finished(out)[job_id] == {elsewhere.number}


@pytest.mark.team
def test_an_agent_cut_off_from_the_database_has_its_job_stopped_before_it_runs_elsewhere(
        team_stack, tmp_path):
    """A partition between host A and PostgreSQL (a TCP relay that is cut): A's job must
    not run to its end while B runs it too; when the link is back, A's late records
    change nothing."""
    url = team_stack.extra["TPUQ_DATABASE_URL"]
    proxy = TcpProxy("127.0.0.1", 5432).start()
    try:
        a, b = two_hosts(tmp_path)
        team_stack.start_agent(a, TPUQ_DATABASE_URL=proxy.url_for(url))
        out = tmp_path / "runs.txt"
        job_id = fault_job(team_stack, out, 8.0)
        first = running_on(team_stack, job_id, "tpu-0", 1)
        team_stack.start_agent(b)
        proxy.cut()
        running_on(team_stack, job_id, "tpu-1", 2)
        assert not is_same_process(first.pid, first.proc_start), "fenced before the requeue"
        proxy.restore()
        team_stack.wait_state(job_id, "succeeded", timeout=60)
    finally:
        proxy.stop()
    records.check_promises(out, team_stack.db, [job_id])
    assert records.finished(out)[job_id] == {2}, "the cut-off attempt never ran to its end"


@pytest.mark.team
def test_a_host_whose_agent_dies_for_good_has_its_job_fenced_then_run_elsewhere(
        team_stack, tmp_path):
    a, b = two_hosts(tmp_path)
    agent_a = team_stack.start_agent(a)
    out = tmp_path / "runs.txt"
    job_id = fault_job(team_stack, out, 8.0)
    first = running_on(team_stack, job_id, "tpu-0", 1)
    team_stack.start_agent(b)
    agent_a.kill()  # never restarted; its keeper lives on
    running_on(team_stack, job_id, "tpu-1", 2)
    assert not is_same_process(first.pid, first.proc_start)
    team_stack.wait_state(job_id, "succeeded", timeout=60)
    records.check_promises(out, team_stack.db, [job_id])


def test_a_job_that_ends_while_no_agent_runs_is_recorded_once(stack, host, tmp_path):
    """The agent is killed; the job ends while it is down. Its keeper records the end
    (no agent ever collects it); the agent that comes back later runs nothing again."""
    agent = stack.start_agent(host, TPUQ_LEASE_S="30")
    out, gate = tmp_path / "record.txt", tmp_path / "gate"
    job_id = stack.submit(*fixture_cmd("record.py", out, gate))
    running = stack.wait_process(job_id)
    agent.kill()
    gate.touch()
    job = stack.wait_state(job_id, "succeeded", timeout=30)
    assert job.attempt == 1
    assert not is_same_process(running.pid, running.proc_start)
    after = stack.submit(*fixture_cmd("record.py", out, 0.1))
    stack.start_agent(host, TPUQ_LEASE_S="30")
    stack.wait_state(after, "succeeded")
    assert stack.job(job_id).attempt == 1 and len(stack.attempts(job_id)) == 1
    assert [ln.split()[0] for ln in out.read_text().splitlines()] == ["start", "end"] * 2


def test_a_job_that_ends_while_its_agent_is_frozen_is_recorded_once_by_its_keeper(
        stack, host, tmp_path):
    """The agent is frozen (alive, connected, silent): the keeper does not wait for the
    lease to run out before it records the end itself, so the job is never requeued as
    lost and run again."""
    agent = stack.start_agent(host)
    out, gate = tmp_path / "record.txt", tmp_path / "gate"
    job_id = stack.submit(*fixture_cmd("record.py", out, gate))
    stack.wait_process(job_id)
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        gate.touch()
        job = stack.wait_state(job_id, "succeeded", "queued", timeout=30)
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    assert job.state == "succeeded" and job.attempt == 1, job.reason
    after = stack.submit(*fixture_cmd("record.py", out, 0.1))
    stack.wait_state(after, "succeeded")
    assert stack.job(job_id).attempt == 1
    assert [ln.split()[0] for ln in out.read_text().splitlines()] == ["start", "end"] * 2


def test_sigusr2_hands_running_jobs_to_the_next_agent(stack, host, tmp_path):
    """An upgrade: the old agent leaves at once on SIGUSR2; its job runs on under its
    keeper, and the new agent adopts it. One attempt, never interrupted.

    The job waits TPUQ_HANDOVER_S (300 s) for the new agent, not its lease (the
    harness's 3 s, less than an agent takes to start on a loaded machine)."""
    agent = stack.start_agent(host)
    out, gate = tmp_path / "record.txt", tmp_path / "gate"
    job_id = stack.submit(*fixture_cmd("record.py", out, gate))
    running = stack.wait_process(job_id)
    agent.proc.send_signal(signal.SIGUSR2)
    assert agent.proc.wait(30) == 0
    assert is_same_process(running.pid, running.proc_start)
    new = stack.start_agent(host)
    wait_for(lambda: "adopted from its keeper" in new.log_since_start(), 15,
             "the new agent to adopt the job", on_timeout=new.log_since_start)
    gate.touch()
    job = stack.wait_state(job_id, "succeeded")
    assert job.attempt == 1 and job.preemptions == 0
    assert [ln.split()[0] for ln in out.read_text().splitlines()] == ["start", "end"]


# ---- host identity ------------------------------------------------------------------------

@pytest.mark.team
def test_an_agent_under_a_live_hosts_name_refuses_and_changes_nothing(team_stack, tmp_path):
    real = FakeHost(tmp_path / "real", name="tpu-0", chips=CHIPS)
    team_stack.start_agent(real)
    before = team_stack.host("tpu-0")
    impostor = FakeHost(tmp_path / "impostor", name="tpu-0", chips=1)  # another machine
    agent = AgentProc(team_stack, impostor, {"TPUQ_HOME": str(tmp_path / "other-home")})
    team_stack.agents.append(agent)
    assert agent.start(wait=False).proc is not None and agent.proc.wait(30) == 1
    lines = [ln for ln in agent.log_tail().splitlines() if "held by a live agent" in ln]
    assert len(lines) == 1 and f"home {team_stack.home}" in lines[0], agent.log_tail()
    after = team_stack.host("tpu-0")
    assert (after.chips, after.agent_instance, after.stopped_at) == \
        (before.chips, before.agent_instance, None)
    job_id = team_stack.submit("--chips", "4", "--", "/bin/true")
    assert team_stack.wait_state(job_id, "succeeded").host == "tpu-0"


@pytest.mark.team
def test_a_thawed_agent_whose_name_was_taken_over_stops_and_touches_nothing(
        team_stack, tmp_path):
    """Host A's agent freezes past TPUQ_HOST_STALE_S; the VM is re-created under the
    same name (another machine) and its agent takes the name over. The old agent, thawed,
    must learn on its first heartbeat that the name is no longer its own and stop
    without writing over the new agent's host row."""
    old = FakeHost(tmp_path / "old-vm", name="tpu-0", chips=CHIPS)
    agent = team_stack.start_agent(old)
    out = tmp_path / "runs.txt"
    job_id = fault_job(team_stack, out, 6.0)
    running_on(team_stack, job_id, "tpu-0", 1)
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        with team_stack.db.read() as s:
            stale_s = 5.0  # the harness's TPUQ_HOST_STALE_S
            wait_for(lambda: not hosts.is_live(team_stack.host("tpu-0").heartbeat_at,
                                               queries.now(s), stale_s), 30,
                     "the frozen agent's host to go stale")
        new = FakeHost(tmp_path / "new-vm", name="tpu-0", chips=CHIPS)
        replacement = team_stack.start_agent(new, TPUQ_HOME=str(tmp_path / "new-home"))
        assert "taking it over" in replacement.log_since_start()
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    assert agent.proc.wait(30) == 1
    assert "is no longer this agent's" in agent.log_since_start()
    row = team_stack.host("tpu-0")
    assert row.stopped_at is None and row.agent_pid == replacement.pid
    team_stack.wait_state(job_id, "succeeded", timeout=60)
    records.check_promises(out, team_stack.db, [job_id])


@pytest.mark.team
def test_host_forget_removes_a_gone_host_and_refuses_a_live_one(team_stack, tmp_path):
    a, b = two_hosts(tmp_path)
    agent_a = team_stack.start_agent(a)
    team_stack.start_agent(b)
    r = team_stack.tpuq("host", "forget", "tpu-0", check=False)
    assert r.returncode == 5 and r.stderr.count("\n") == 1 and "is alive" in r.stderr
    assert agent_a.stop() == 0
    r = team_stack.tpuq("host", "forget", "tpu-0")
    assert "tpu-0: forgotten" in r.stdout
    assert team_stack.host("tpu-0") is None
    assert "tpu-0" not in team_stack.tpuq("status").stdout
    r = team_stack.tpuq("host", "forget", "tpu-0", check=False)
    assert r.returncode == 3


# ---- leadership -----------------------------------------------------------------------------

@pytest.mark.team
def test_a_stopping_leader_hands_over_at_once(team_stack, tmp_path):
    """With a leader lease of a minute, only the hand-over can move leadership in time."""
    a, b = two_hosts(tmp_path)
    slow = {"TPUQ_LEADER_LEASE_S": "60"}
    agent_a = team_stack.start_agent(a, **slow)
    wait_for(lambda: leader_of(team_stack) == "tpu-0", 30, "tpu-0 to lead")
    team_stack.start_agent(b, **slow)
    agent_a.stop()
    wait_for(lambda: leader_of(team_stack) == "tpu-1", 20, "tpu-1 to lead after the hand-over")
    job_id = team_stack.submit("--", "/bin/true")
    assert team_stack.wait_state(job_id, "succeeded", timeout=20).host == "tpu-1"


@pytest.mark.team
def test_a_dead_leader_is_replaced_within_four_thirds_of_its_lease(team_stack, tmp_path):
    """The bound (README): another agent leads within 4/3 of TPUQ_LEADER_LEASE_S of the
    leader's last renewal. Waited for with room for a loaded 2-core machine, and far
    below the job lease (60 s here) that used to decide it."""
    a, b = two_hosts(tmp_path)
    fast = {"TPUQ_LEADER_LEASE_S": "3", "TPUQ_LEASE_S": "60", "TPUQ_HOST_STALE_S": "60"}
    agent_a = team_stack.start_agent(a, **fast)
    wait_for(lambda: leader_of(team_stack) == "tpu-0", 30, "tpu-0 to lead")
    team_stack.start_agent(b, **fast)
    team_stack.tpuq("drain", "tpu-0")  # the next job can only start on tpu-1
    agent_a.kill()
    team_stack.kill_keepers(a)
    job_id = team_stack.submit("--", "/bin/true")
    wait_for(lambda: leader_of(team_stack) == "tpu-1", 4 + 6, "tpu-1 to take over")
    assert team_stack.wait_state(job_id, "succeeded", timeout=10).host == "tpu-1"
