"""The team deployment under faults: many hosts, one leader, a broker that comes and goes.

The property everywhere: every job runs exactly once to success (no attempt twice at
once, nothing lost), and no chip of a host is used by two jobs at the same time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.harness import FakeHost, Stack, fixture_cmd, wait_for
from tests.services import free_port
from tpuq.scheduler.passes import ROLE
from tpuq.state import attempts, leader
from tpuq.state.models import Job, Leader

pytestmark = pytest.mark.team


def runs(outdir: Path) -> list[list[str]]:
    path = outdir / "runs.txt"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def assert_exactly_once(outdir: Path, ids: list[int]) -> None:
    assert not (outdir / "overlaps.txt").exists(), (outdir / "overlaps.txt").read_text()
    counts = Counter(int(r[0]) for r in runs(outdir))
    assert counts == Counter(ids), "every job must have run to the end exactly once"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """Where record_host.py jobs write their runs and any overlap."""
    d = tmp_path / "out"
    d.mkdir()
    return d


# another machine of the deployment: not a job's host, and no agent answers on it
LAPTOP = {"TPUQ_HOST": "laptop", "TPUQ_AGENT_SOCKET": "/nonexistent/agent.sock"}


def hosts(tmp_path: Path, n: int) -> list[FakeHost]:
    return [FakeHost(tmp_path / f"host-{i}", name=f"tpu-{i}") for i in range(n)]


def test_three_hosts_thirty_jobs_each_run_exactly_once(team_stack, tmp_path, out):
    for h in hosts(tmp_path, 3):
        team_stack.start_agent(h)
    # queued held, then released together: all three hosts have work waiting at once
    ids = [team_stack.submit("--hold", *fixture_cmd("record_host.py", out, 0.2))
           for _ in range(30)]
    team_stack.tpuq("release", *map(str, ids))
    team_stack.wait_all(ids, "succeeded", timeout=120)
    assert_exactly_once(out, ids)
    used = {r[2] for r in runs(out)}
    assert used == {"tpu-0", "tpu-1", "tpu-2"}, "work spreads over every host"


def test_duplicate_and_stale_doorbells_change_nothing(team_stack, host, tmp_path, out):
    team_stack.start_agent(host)
    job_id = team_stack.submit(*fixture_cmd("record_host.py", out, 2))
    team_stack.wait_log(job_id, "running")
    ring = ("from tpuq.queue import doorbell; import sys; "
            "assert doorbell.start_on_host('tpu-a', int(sys.argv[1]), int(sys.argv[2]))")
    env = team_stack.env()
    for attempt in (1, 1, 0, 7):  # duplicates of the live attempt, a stale and a future one
        subprocess.run([sys.executable, "-c", ring, str(job_id), str(attempt)], env=env,
                       check=True, timeout=30)
    team_stack.wait_state(job_id, "succeeded")
    assert_exactly_once(out, [job_id])
    assert len(team_stack.attempts(job_id)) == 1


def test_lost_doorbell_is_recovered_by_the_host(team_stack, host):
    # the test takes the leader lease itself and assigns without ringing anyone
    with team_stack.db.write() as s:
        assert leader.acquire(s, ROLE, "the-test", 600)
    team_stack.start_agent(host)
    job_id = team_stack.submit("--", "/bin/true")
    with team_stack.db.write() as s:
        assert attempts.assign(s, job_id, 0, "tpu-a", [0, 1, 2, 3], lease_s=30) == 1
    team_stack.wait_state(job_id, "succeeded", timeout=15)


def test_a_late_doorbell_joins_the_attempt_the_host_poll_started(team_stack, host):
    """The host's poll started the attempt before its message came: the late `tpuq.run`
    task stays active with it, so `celery inspect active` still lists the running job."""
    with team_stack.db.write() as s:
        assert leader.acquire(s, ROLE, "the-test", 600)
    team_stack.start_agent(host)
    job_id = team_stack.submit("--", "/bin/sleep", "600")
    with team_stack.db.write() as s:
        assert attempts.assign(s, job_id, 0, "tpu-a", [0, 1, 2, 3], lease_s=30) == 1
    team_stack.wait_state(job_id, "running", timeout=15)  # started by the poll alone
    ring = ("from tpuq.queue import doorbell; import sys; "
            "assert doorbell.start_on_host('tpu-a', int(sys.argv[1]), 1)")
    subprocess.run([sys.executable, "-c", ring, str(job_id)], env=team_stack.env(), check=True,
                   timeout=30)
    tasks = wait_for(lambda: active_tasks(team_stack) or None, 30, "the late task to be active")
    assert [(t["name"], t["args"]) for t in tasks] == [("tpuq.run", [job_id, 1])]
    assert len(team_stack.attempts(job_id)) == 1
    team_stack.tpuq("cancel", str(job_id))
    team_stack.wait_state(job_id, "cancelled")


def test_the_leader_starts_its_own_hosts_attempts_without_the_broker(team_stack, host):
    """The leading agent starts what it assigned to its own host in process, as the
    embedded agent does, and sends itself no message. Here its worker consumes nothing
    from the host's queue and the host's poll is a minute away: the job still runs to its
    end at once, and no `tpuq.run` message was ever queued for the host."""
    import redis

    team_stack.start_agent(host, TPUQ_HEARTBEAT_S="60", TPUQ_LEASE_S="180",
                           TPUQ_HOST_STALE_S="180")
    cancel = celery(team_stack, "control", "cancel_consumer", "tpuq.host.tpu-a")
    assert cancel.returncode == 0 and "no longer consuming" in cancel.stdout, cancel
    job_id = team_stack.submit("--", "/bin/true")
    team_stack.wait_state(job_id, "succeeded", timeout=30)
    broker = redis.Redis.from_url(team_stack.extra["TPUQ_BROKER_URL"])
    try:
        assert broker.llen("tpuq.host.tpu-a") == 0, "a message was queued for the leader"
    finally:
        broker.close()


def test_dead_host_jobs_requeue_after_lease_expiry_and_run_elsewhere(team_stack, tmp_path):
    a, b = hosts(tmp_path, 2)
    agent_a = team_stack.start_agent(a)
    job_id = team_stack.submit("--", "/bin/sleep", "600")
    first = team_stack.wait_process(job_id)
    assert first.host == "tpu-0"
    agent_b = team_stack.start_agent(b)
    pid = first.pid
    agent_a.kill()  # the host dies: agent, keeper and job, and never comes back
    team_stack.kill_keepers(a)
    os.killpg(pid, signal.SIGKILL)
    job = wait_for(lambda: (j := team_stack.job(job_id)).host == "tpu-1" and j.state == "running"
                   and j, 30, "the job to run on the surviving host")
    first = team_stack.attempts(job_id)[0]
    assert first.outcome == "lost" and "lease expired" in first.reason
    assert job.failures == 0
    # its output never reached Redis: `tpuq logs` elsewhere says where the file is
    wait_for(lambda: f"the whole log is tpu-0:{first.log_path}" in team_stack.tpuq(
        "logs", str(job_id), "--attempt", "1", **LAPTOP).stderr, 30,
        "tpuq logs to name the dead host's log file")
    # and `tpuq status` says the dead host takes no work (stale after TPUQ_HOST_STALE_S)
    lines = wait_for(lambda: [ln for ln in team_stack.tpuq("status").stdout.splitlines()
                              if ln.startswith("tpu-0 ") and "silent" in ln], 30,
                     "status to call tpu-0 silent")
    assert lines[0].endswith("silent: gets no work")
    assert agent_b.proc.poll() is None


def test_leader_failover_keeps_dispatching(team_stack, tmp_path):
    a, b = hosts(tmp_path, 2)
    agents = {h.name: team_stack.start_agent(h) for h in (a, b)}
    first = team_stack.submit("--", "/bin/true")
    team_stack.wait_state(first, "succeeded")
    with team_stack.db.read() as s:
        lead = s.get(Leader, ROLE).holder
    agents[lead].kill()
    ids = [team_stack.submit("--", "/bin/true") for _ in range(3)]
    jobs = team_stack.wait_all(ids, "succeeded", timeout=30)
    other = ({"tpu-0", "tpu-1"} - {lead}).pop()
    assert {j.host for j in jobs} == {other}
    with team_stack.db.read() as s:
        assert s.get(Leader, ROLE).holder == other


def test_chips_freed_on_a_host_that_does_not_lead_are_used_at_once(team_stack, tmp_path):
    """A job that ends on another host rings the leader: the queued job waiting for those
    chips starts then, not at the leader's next poll (an hour away here)."""
    slow = {"TPUQ_POLL_S": "3600", "TPUQ_LEASE_S": "3600"}
    a, b = hosts(tmp_path, 2)
    team_stack.start_agent(a, **slow)
    wait_for(lambda: leader_of(team_stack) == "tpu-0", 30, "tpu-0 to lead")
    team_stack.start_agent(b, **slow)
    wait_for(lambda: (h := team_stack.host("tpu-1")) and h.heartbeat_at, 30, "tpu-1 to register")
    gates = {n: tmp_path / f"gate-{n}" for n in (1, 2)}
    first = {n: team_stack.submit(*fixture_cmd("until_gate.py", gates[n])) for n in gates}
    for job_id in first.values():
        team_stack.wait_log(job_id, "ready")
    on_b = next(n for n, j in first.items() if team_stack.job(j).host == "tpu-1")
    waiting = team_stack.submit("--", "/bin/true")
    # every chip is busy: the pass stops early, so no reservation is made yet
    wait_for(lambda: "waiting for a free host" in team_stack.tpuq("status").stdout, 30,
             "the third job to wait for a host",
             on_timeout=lambda: team_stack.tpuq("status").stdout)
    gates[on_b].touch()
    job = team_stack.wait_state(waiting, "succeeded", timeout=60)
    assert job.host == "tpu-1"
    assert leader_of(team_stack) == "tpu-0", "the leader scheduled it, not a new one"
    assert team_stack.job(first[3 - on_b]).state == "running"


def leader_of(stack: Stack) -> str | None:
    with stack.db.read() as s:
        return leader.current(s, ROLE)


def test_job_longer_than_visibility_timeout_runs_once(team_stack, host, tmp_path, out):
    team_stack.extra["TPUQ_BROKER_VISIBILITY_S"] = "1"
    team_stack.start_agent(host)
    job_id = team_stack.submit(*fixture_cmd("record_host.py", out, 5))
    team_stack.wait_state(job_id, "succeeded", timeout=30)
    assert_exactly_once(out, [job_id])
    assert len(team_stack.attempts(job_id)) == 1


def celery(stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "celery", "-A", "tpuq.queue.app", *args],
                          env=stack.env(), capture_output=True, text=True, timeout=60)


def active_tasks(stack) -> list[dict]:
    """`celery inspect active` of the one agent: its active tasks."""
    active = celery(stack, "inspect", "active", "--json")
    assert active.returncode == 0, active.stderr
    [tasks] = json.loads(active.stdout.strip().splitlines()[-1]).values()
    return tasks


def test_celery_inspect_lists_running_jobs_and_chip_slots(team_stack, host):
    """A host other than the leader's starts its attempt from a `tpuq.run` message, which
    stays active while it runs (here the test leads, assigns and rings)."""
    with team_stack.db.write() as s:
        assert leader.acquire(s, ROLE, "the-test", 600)
    team_stack.start_agent(host, TPUQ_HEARTBEAT_S="60", TPUQ_LEASE_S="180",
                           TPUQ_HOST_STALE_S="180")  # no poll: only the message starts it
    job_id = team_stack.submit("--", "/bin/sleep", "600")
    with team_stack.db.write() as s:
        assert attempts.assign(s, job_id, 0, "tpu-a", [0, 1, 2, 3], lease_s=30) == 1
    ring = ("from tpuq.queue import doorbell; import sys; "
            "assert doorbell.start_on_host('tpu-a', int(sys.argv[1]), 1)")
    subprocess.run([sys.executable, "-c", ring, str(job_id)], env=team_stack.env(), check=True,
                   timeout=30)
    team_stack.wait_state(job_id, "running")
    tasks = wait_for(lambda: active_tasks(team_stack) or None, 30, "the task to be active")
    assert [(t["name"], t["args"]) for t in tasks] == [("tpuq.run", [job_id, 1])]
    slots = celery(team_stack, "inspect", "tpuq_slots", "--json")
    [reply] = json.loads(slots.stdout.strip().splitlines()[-1]).values()
    assert reply["host"] == "tpu-a"
    assert reply["chips"] == {str(c): f"job {job_id} attempt 1" for c in range(4)}
    team_stack.tpuq("cancel", str(job_id))
    team_stack.wait_state(job_id, "cancelled")


def test_flower_runs_against_the_app(team_stack, host):
    team_stack.start_agent(host)
    port = free_port()
    flower = subprocess.Popen([sys.executable, "-m", "celery", "-A", "tpuq.queue.app", "flower",
                               f"--port={port}", "--address=127.0.0.1"],
                              env=team_stack.env(FLOWER_UNAUTHENTICATED_API="true"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def workers() -> dict | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/workers?refresh=1",
                                            timeout=5) as r:
                    data = json.load(r)
                    return data if "tpuq@tpu-a" in data else None
            except OSError:
                return None

        assert "tpuq@tpu-a" in wait_for(workers, 60, "flower to see the agent's worker", 0.5)
    finally:
        flower.terminate()
        flower.wait(10)


def test_cancel_reaches_the_host_through_the_control_queue(team_stack, host, tmp_path):
    # polls are an hour apart: only the control message can deliver the cancel
    team_stack.start_agent(host, TPUQ_HEARTBEAT_S="3600", TPUQ_LEASE_S="7200",
                           TPUQ_HOST_STALE_S="10800", TPUQ_POLL_S="3600")
    marker = tmp_path / "stopped"
    job_id = team_stack.submit(*fixture_cmd("trap_term.py", marker))
    team_stack.wait_log(job_id, "ready")
    team_stack.tpuq("cancel", str(job_id))
    team_stack.wait_state(job_id, "cancelled", timeout=10)
    assert marker.exists()


def test_logs_follow_from_another_machine_reads_the_stream(team_stack, host, tmp_path):
    team_stack.start_agent(host)
    job_id = team_stack.submit("--", "/bin/sh", "-c", "echo first; sleep 1; echo second")
    team_stack.wait_state(job_id, "running")
    # run from a machine that is not the job's host: the output comes from Redis
    r = team_stack.tpuq("logs", str(job_id), "-f", **LAPTOP)
    assert r.stdout.splitlines() == ["first", "second"]
    assert "attempt 1's output comes from tpu-a's log stream" in r.stderr
    assert team_stack.job(job_id).state == "succeeded"


def test_submit_on_a_host_goes_through_its_agent(team_stack, host):
    """On a TPU VM `tpuq submit` hands the job to the local agent: the CLI needs neither
    working database credentials nor the broker (the agent writes and rings)."""
    team_stack.start_agent(host)
    pg = team_stack.extra["TPUQ_DATABASE_URL"]
    no_such_role = pg.replace("postgres@", "nobody_here@", 1)
    assert no_such_role != pg
    job_id = team_stack.submit("--", "/bin/true", TPUQ_DATABASE_URL=no_such_role,
                               TPUQ_BROKER_URL=f"redis://127.0.0.1:{free_port()}/0")
    job = team_stack.wait_state(job_id, "succeeded")
    assert job.owner == "tester"
    # and without the agent the same CLI settings fail: the role really does not exist
    team_stack.agents[0].stop()
    r = team_stack.tpuq("submit", "--", "/bin/true", check=False,
                        TPUQ_DATABASE_URL=no_such_role)
    assert r.returncode == 1 and "nobody_here" in r.stderr, r.stderr


def test_submit_beside_an_agent_of_another_deployment_goes_to_its_own(team_stack, host):
    """A personal embedded agent answering on the socket must not take a team job."""
    personal = Stack(home=team_stack.home)  # same TPUQ_HOME, embedded settings
    try:
        personal.start_agent(host)
        job_id = team_stack.submit("--hold", "--", "/bin/true")
        assert team_stack.job(job_id).state == "held"  # in PostgreSQL
        with personal.db.read() as s:
            assert s.query(Job).count() == 0, "the embedded agent took a team job"
    finally:
        personal.cleanup()


def test_a_login_shell_on_a_team_host_submits_to_the_team_queue(team_stack, host, tmp_path):
    """/etc/profile.d/tpuq.sh sets only TPUQ_AGENT_SOCKET: a shell with no team settings
    must still queue into the team's database through the host's agent, never into a
    private SQLite file of its own."""
    agent = team_stack.start_agent(host)
    own_home = tmp_path / "user-home"
    login = {"TPUQ_HOME": str(own_home), "TPUQ_DATABASE_URL": "", "TPUQ_BROKER_URL": "",
             "TPUQ_AGENT_SOCKET": str(team_stack.home / "agent.sock")}
    job_id = team_stack.submit("--", "/bin/true", **login)
    assert team_stack.wait_state(job_id, "succeeded").state == "succeeded"
    # every other command works there too, through the agent: no credentials needed
    r = team_stack.tpuq("status", "--json", **login)
    assert [j["id"] for j in json.loads(r.stdout)] == [job_id]
    assert "/bin/true" in team_stack.tpuq("show", str(job_id), **login).stdout
    # with the agent down, a submit fails instead of queueing where nobody looks
    agent.stop()
    r = team_stack.tpuq("submit", "--", "/bin/true", check=False, **login)
    assert r.returncode == 1 and "no agent answers at" in r.stderr, r.stderr
    assert not (own_home / "tpuq.db").exists(), "nothing queued into a private database"
