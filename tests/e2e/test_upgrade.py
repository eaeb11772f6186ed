"""A rolling upgrade from the previous release, done as docs/upgrading.md says, with jobs of
every kind in flight.

The previous release (tests/releases.py: installed from its commit into a virtualenv of
its own) runs the deployment and its jobs: one running, one running with a job chained
after it (`--after`), an array limited to two tasks at once (`%2`), one waiting for
chips, one held. Then the upgrade:

- embedded: the package is replaced and the agent restarted with the SIGUSR2 hand-over;
  the new agent migrates the database itself;
- team: `tpuq db upgrade` under the running old agents (whose leadership, assignments and
  starts the new schema refuses from then on), then each host's agent is handed over, one
  host at a time.

The jobs' own records then say that nothing running was restarted (one start line, one
attempt), nothing queued or held was lost, the chained job started after the job it
waited for ended, and no more than two tasks of the array ever ran at once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from sqlalchemy import text

from tests import releases
from tests.harness import AgentProc, FakeHost, Stack, fixture_cmd, wait_for
from tpuq import protocol
from tpuq.state.db import SCHEMA_HEAD

# a hand-over must end within the jobs' leases (their keepers stop jobs whose agent stays
# away longer): 15 s, not the harness's 3 s, lets a new agent start on a loaded machine
LEASE = {"TPUQ_LEASE_S": "15"}


@pytest.fixture(scope="session")
def previous() -> list[str]:
    return releases.install()


@pytest.fixture(params=["embedded", "team"])
def old_stack(request: pytest.FixtureRequest, tmp_path: Path, previous: list[str]):
    """A deployment set up by the previous release (its schema, its `db upgrade`)."""
    s = Stack(home=tmp_path / "home")
    if request.param == "team":
        s.extra.update(TPUQ_DATABASE_URL=request.getfixturevalue("pg_url"),
                       TPUQ_BROKER_URL=request.getfixturevalue("redis_server").url)
        s.tpuq("db", "upgrade", command=previous)
    s.deployment = request.param  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        s.cleanup()


def state(s: Stack, job_id: int) -> str:
    """Read with plain SQL: the tests' models are today's, the schema may be the old one."""
    with s.db.engine.connect() as c:
        return str(c.execute(text("SELECT state FROM jobs WHERE id = :i"), {"i": job_id})
                   .scalar_one())


def old_hosts(s: Stack, tmp_path: Path) -> list[str]:
    """Hosts today's `tpuq status` says run an agent older than the database; asked off
    the hosts (their socket may be served by an agent of the old release)."""
    status = s.tpuq("status", TPUQ_AGENT_SOCKET=str(tmp_path / "no-agent.sock")).stdout
    return [ln.split()[0] for ln in status.splitlines()
            if ln.startswith("tpu-") and "agent's tpuq is older than the database" in ln]


def running_on(s: Stack, host: str) -> int:
    with s.db.engine.connect() as c:
        return int(c.execute(text("SELECT count(*) FROM jobs WHERE host = :h AND state = "
                                  "'running'"), {"h": host}).scalar_one())


def wait_running(s: Stack, *ids: int) -> None:
    for job_id in ids:
        wait_for(lambda j=job_id: state(s, j) == "running", 30, f"job {job_id} to run")


def hand_over(s: Stack, old: AgentProc) -> AgentProc:
    """SIGUSR2 to the old agent; today's agent for the same host adopts its jobs."""
    assert old.proc is not None
    jobs_there = running_on(s, old.host.name)
    old.proc.send_signal(signal.SIGUSR2)
    assert old.proc.wait(30) == 0, old.log_tail()
    new = s.start_agent(old.host, **LEASE)
    wait_for(lambda: new.log_since_start().count("adopted from its keeper") == jobs_there, 20,
             f"the new agent on {old.host.name} to adopt {jobs_there} job(s)",
             on_timeout=new.log_since_start)
    return new


def test_a_rolling_upgrade_from_the_previous_release_costs_no_job_anything(
        old_stack: Stack, previous: list[str], tmp_path: Path) -> None:
    s, team = old_stack, old_stack.deployment == "team"  # type: ignore[attr-defined]
    names = ["tpu-a", "tpu-b"] if team else ["tpu-a"]
    hosts = [FakeHost(tmp_path / n, name=n, chips=4) for n in names]
    old = [s.start_agent(h, command=previous, **LEASE) for h in hosts]
    gate = {k: tmp_path / f"gate-{k}" for k in ("run", "first", "array")}
    out = {k: tmp_path / f"{k}.txt" for k in ("run", "chain", "array", "queued")}

    def submit(*args: object, chips: int = 1) -> int:
        return int(s.tpuq("submit", "-q", "--chips", str(chips), *map(str, args),
                          command=previous).stdout)

    running = submit(*fixture_cmd("record.py", out["run"], gate["run"]))
    first = submit(*fixture_cmd("record.py", out["chain"], gate["first"]))
    then = submit("--after", first, *fixture_cmd("record.py", out["chain"], 0.1))
    array = submit("--array", "0-3%2", *fixture_cmd("array_task.py", out["array"],
                                                    gate["array"], 0))
    wait_running(s, running, first, array, array + 1)
    # embedded: waits for chips; team: runs on the other host, or waits
    queued = submit(*fixture_cmd("record.py", out["queued"], 0.1), chips=4)
    held = submit("--hold", "--", "/bin/true")

    if team:
        up = s.tpuq("db", "upgrade")
        assert f"{releases.PREVIOUS_SCHEMA} -> {SCHEMA_HEAD}" in up.stdout
        # the old leader's next renewal is refused: it leads no more, nor does any old agent
        wait_for(lambda: any("lost scheduler leadership" in a.log_since_start() for a in old),
                 20, "the old leader to stop leading")
        gate["array"].touch()  # chips free up while only old agents run: they assign nothing
        wait_for(lambda: all(state(s, array + i) == "succeeded" for i in (0, 1)), 20,
                 "the array's first tasks to end")
        assert old_hosts(s, tmp_path) == ["tpu-a", "tpu-b"]
        new = [hand_over(s, old[0])]
        assert old_hosts(s, tmp_path) == ["tpu-b"]
        gate["first"].touch()
        s.wait_state(then, "succeeded", timeout=60)
        new.append(hand_over(s, old[1]))
    else:
        new = [hand_over(s, old[0])]
        gate["first"].touch()
        gate["array"].touch()
    gate["run"].touch()
    for job_id in (running, first, then, queued, *range(array, array + 4)):
        job = s.wait_state(job_id, "succeeded", timeout=60)
        assert job.attempt == 1, f"job {job_id} ran {job.attempt} times: {job.reason}"
    assert s.job(held).state == "held" and s.job(held).attempt == 0

    assert starts_and_ends(out["run"]) == [("start", running), ("end", running)]
    assert starts_and_ends(out["chain"]) == [("start", first), ("end", first),
                                             ("start", then), ("end", then)], \
        "the chained job started before the job it waited for had ended (or beside it)"
    assert most_at_once(out["array"]) == 2
    # today's show and logs read a job of the old release, output from before included
    assert "running" in s.tpuq("logs", str(running)).stdout
    assert "succeeded" in s.tpuq("show", str(running)).stdout
    assert all(a.proc is not None and a.proc.poll() is None for a in new)


def starts_and_ends(path: Path) -> list[tuple[str, int]]:
    """record.py's lines: (`start`|`end`|`OVERLAP`, job) in the order written."""
    return [(w[0], int(w[1])) for w in (ln.split() for ln in path.read_text().splitlines())]


def most_at_once(path: Path) -> int:
    """The most tasks array_task.py found running at one time, from their own times."""
    moves = []
    for ln in path.read_text().splitlines():
        w = ln.split()
        moves.append((float(w[-1]), 1 if w[0] == "start" else -1))
    now = most = 0
    for _, d in sorted(moves, key=lambda m: (m[0], m[1])):
        now += d
        most = max(most, now)
    return most


@pytest.mark.embedded_only
def test_an_agent_whose_code_the_schema_no_longer_admits_stops_acting_but_keeps_its_jobs(
        stack: Stack, host: FakeHost, tmp_path: Path) -> None:
    """As a later release's `tpuq db upgrade` that raises the minimum code would leave it."""
    agent = stack.start_agent(host)
    out, gate = tmp_path / "run.txt", tmp_path / "gate"
    running = stack.submit(*fixture_cmd("record.py", out, gate))
    stack.wait_process(running)
    with stack.db.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '9999'"))
        s.execute(text("UPDATE meta SET value = '9999' WHERE key = 'min_code'"))
    wait_for(lambda: "This agent no longer leads, assigns or starts jobs; the 1 it runs go "
             "on" in agent.log_since_start(), 20, "the agent to stand down",
             on_timeout=agent.log_since_start)


    def leading() -> int:
        with stack.db.read() as s:
            return int(s.execute(text("SELECT count(*) FROM leaders WHERE expires_at > 0"))
                       .scalar_one())

    # the lease is given up in the pass after the one that said so
    wait_for(lambda: leading() == 0, 20, "the agent's leadership to be given up")
    status = stack.tpuq("status").stdout  # the agent answers: it still serves its socket
    assert f"{host.name}" in status and "agent's tpuq is older than the database (schema " \
        f"{SCHEMA_HEAD}, needs 9999)" in status, status
    gate.touch()
    job = stack.wait_state(running, "succeeded")
    assert job.attempt == 1 and starts_and_ends(out) == [("start", running), ("end", running)]


def jobs_in(s: Stack) -> int:
    with s.db.engine.connect() as c:
        return int(c.execute(text("SELECT count(*) FROM jobs")).scalar_one())


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.embedded_only
def test_a_tpuq_newer_than_its_agent_is_told_so_and_nothing_is_done(
        stack: Stack, host: FakeHost, previous: list[str]) -> None:
    """Today's CLI through the socket of the previous release's agent (whose protocol
    carried no version): one line naming both, and no job."""
    stack.start_agent(host, command=previous)
    r = stack.tpuq("submit", "--", "/bin/true", check=False)
    line = one_line(r.stderr)
    assert r.returncode == 1, r.stderr
    assert f"agent is older than this tpuq (socket protocol 1, this tpuq {protocol.PROTOCOL})" \
        in line, line
    assert "nothing was done" in line and "upgrade the agent" in line, line
    assert jobs_in(stack) == 0


@pytest.mark.embedded_only
def test_a_tpuq_older_than_its_agent_is_refused_in_one_line_and_nothing_is_done(
        stack: Stack, host: FakeHost, previous: list[str]) -> None:
    """The previous release's CLI through today's agent's socket: refused in a reply it
    can read (no garbled answer, no "may or may not"), and no job."""
    stack.start_agent(host)
    r = stack.tpuq("submit", "--", "/bin/true", check=False, command=previous)
    line = one_line(r.stderr)
    assert r.returncode != 0 and "garbled" not in line and "may or may not" not in line, line
    served = f"{protocol.OLDEST}..{protocol.PROTOCOL}"
    assert f"this tpuq speaks socket protocol 1, this host's agent {served}: nothing was done" \
        in line and "upgrade tpuq where you ran it" in line, line
    assert jobs_in(stack) == 0
