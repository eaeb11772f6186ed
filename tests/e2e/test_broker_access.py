"""The broker gives a user no power over other users or agents. A user gets what `tpuq
user add` hands them, a login role and a broker account, and from a laptop with exactly
those: follows their own job's output, rings the agents (through the database), and
cannot read a colleague's output stream, write or list anything, publish to Celery's
queues or its remote-control channel, or stop an agent's consumer. An agent whose
consumer an admin stopped consumes again by itself."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from tests.e2e.test_team import LAPTOP
from tests.harness import TPUQ, Stack, wait_for
from tpuq.queue import accounts, logstream
from tpuq.state import roles

CELERY = [sys.executable, "-m", "celery", "-A", "tpuq.queue.app"]


@dataclass
class User:
    name: str
    env: dict[str, str]  # a laptop's: their database URL and broker URL, nothing else

    def tpuq(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TPUQ, *args], env=self.env, capture_output=True, text=True,
                              timeout=120)


def add_user(stack: Stack, base: str) -> User:
    """`tpuq user add`, as the deployment's owner runs it, and what it hands the user."""
    name = f"{base}_{secrets.token_hex(3)}"
    out = stack.tpuq("user", "add", name).stdout
    said = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert "broker_url" in said, f"tpuq user add hands out no broker account:\n{out}"
    database = stack.extra["TPUQ_DATABASE_URL"].replace(
        "postgres@", f"{name}:{said['password']}@", 1)
    env = stack.env(**LAPTOP, TPUQ_DATABASE_URL=database, TPUQ_BROKER_URL=said["broker_url"],
                    TPUQ_USER="")
    return User(name, env)


@pytest.fixture
def colleagues(guarded_stack: Stack) -> Iterator[tuple[User, User]]:
    made: list[str] = []
    try:
        alice = add_user(guarded_stack, "alice")
        made.append(alice.name)
        bob = add_user(guarded_stack, "bob")
        made.append(bob.name)
        yield alice, bob
    finally:
        with guarded_stack.db.write() as s:
            for name in made:
                roles.drop_login(s, name)


def submit(user: User, *command: str) -> int:
    r = user.tpuq("submit", "-q", "--", *command)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def refused(call) -> bool:  # type: ignore[no-untyped-def]
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    return False


def test_a_users_broker_account_reads_their_own_output_and_nothing_else(
        guarded_stack, host, colleagues):
    stack = guarded_stack
    alice, bob = colleagues
    stack.start_agent(host, TPUQ_POLL_S="3600")  # only a wake-up makes it schedule
    his = submit(bob, "/bin/sh", "-c", "echo WANDB_API_KEY=bob-secret")
    hers = submit(alice, "/bin/sh", "-c", "echo alice-output")
    stack.wait_all([his, hers], "succeeded")  # rung from a laptop, through the database
    r = alice.tpuq("logs", "-f", str(hers))
    assert (r.returncode, r.stdout) == (0, "alice-output\n"), r.stderr
    assert "comes from tpu-a's log stream" in r.stderr
    r = alice.tpuq("logs", str(his))
    assert r.returncode == 4 and "only its owner or an admin may read it" in r.stderr
    wrong = User(alice.name, {**alice.env, "TPUQ_BROKER_URL": accounts.user_url(
        stack.redis.url, alice.name, "not-her-password")})
    r = wrong.tpuq("logs", str(hers))
    assert r.returncode == 0 and "attempt 1's output cannot be read from the broker (" in \
        r.stderr and "the whole log is tpu-a:" in r.stderr and "Traceback" not in r.stderr

    own = redis.Redis.from_url(alice.env["TPUQ_BROKER_URL"])
    admin = redis.Redis.from_url(stack.redis.url)
    bobs = logstream.key(bob.name, his, 1)
    assert b"bob-secret" in b"".join(f[b"d"] for _, f in admin.xrange(bobs) if b"d" in f)
    assert own.xrange(logstream.key(alice.name, hers, 1)), "her own stream: hers to read"
    db = stack.redis.url.rsplit("/", 1)[1]
    for attempt in [
        lambda: own.xrange(bobs),
        lambda: own.xread({bobs: "0-0"}),
        lambda: own.xrange(logstream.legacy_key(his, 1)),
        lambda: own.keys("*"),
        lambda: own.scan(0),
        lambda: own.xadd(logstream.key(alice.name, hers, 1), {"d": b"forged"}),
        lambda: own.delete(logstream.key(alice.name, hers, 1)),
        lambda: own.lpush("tpuq.host.tpu-a", "{}"),
        lambda: own.publish(f"/{db}.celery.pidbox/", "{}"),
        lambda: own.publish(f"/{db}.tpuq.control/tpuq.control", "{}"),
        lambda: own.execute_command("ACL", "SETUSER", alice.name, "+@all", "~*"),
        lambda: own.execute_command("CONFIG", "SET", "requirepass", ""),
    ]:
        assert refused(attempt), "a user's broker account may do only what it must"
    # Celery's own remote control, with the user's broker URL: no agent stops
    r = subprocess.run([*CELERY, "control", "shutdown"], env=alice.env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "has no permissions" in r.stderr, r.stdout + r.stderr
    assert ping(stack), "the agent's consumer answers as before"
    assert "Celery consumer stopped" not in stack.agents[0].log_since_start()


def ping(stack: Stack) -> bool:
    """The agent's Celery consumer answers a remote-control ping (the admin's account)."""
    r = subprocess.run([*CELERY, "inspect", "ping", "-d", "tpuq@tpu-a", "--timeout", "2"],
                       env=stack.env(), capture_output=True, text=True, timeout=60)
    return r.returncode == 0 and "pong" in r.stdout


def test_an_agents_consumer_stopped_by_an_admin_consumes_again(guarded_stack, host):
    stack = guarded_stack
    agent = stack.start_agent(host)
    wait_for(lambda: ping(stack), 30, "the agent's consumer to answer")
    # a worker that shuts down sends no reply: the command says no node replied
    subprocess.run([*CELERY, "control", "shutdown", "-d", "tpuq@tpu-a", "--timeout", "1"],
                   env=stack.env(), capture_output=True, text=True, timeout=60)
    wait_for(lambda: ping(stack), 30, "the consumer to answer again", on_timeout=agent.log_tail)
    log = agent.log_since_start()
    assert "Got shutdown from remote" in log and "Celery consumer stopped" in log, log
    job = stack.submit("--", "/bin/true")
    stack.wait_state(job, "succeeded")
    assert agent.proc is not None and agent.proc.poll() is None, "no restart"


def test_output_shipped_under_the_old_stream_name_still_reads(guarded_stack, host, colleagues):
    """An agent from before owner keys shipped `tpuq:log:<job>:<attempt>`: during an
    upgrade the agents' and admins' account still reads it there; a user's account, which
    may not, is told where the whole log is instead of being shown nothing as all."""
    stack = guarded_stack
    alice, _ = colleagues
    stack.start_agent(host)
    job = submit(alice, "/bin/sh", "-c", "echo shipped-long-ago")
    stack.wait_state(job, "succeeded")
    admin = redis.Redis.from_url(stack.redis.url)
    new = logstream.key(alice.name, job, 1)
    wait_for(lambda: any(b"eof" in f for _, f in admin.xrange(new)), 30, "the end shipped")
    for _, fields in admin.xrange(new):  # as an agent of the version before wrote it
        admin.xadd(logstream.legacy_key(job, 1), fields)
    admin.delete(new)
    r = stack.tpuq("logs", str(job), **LAPTOP)
    assert r.stdout == "shipped-long-ago\n", r.stderr
    # an attempt that ended a moment ago may still be shipping its end: asked again
    said = wait_for(lambda: (r := alice.tpuq("logs", str(job))).stdout == "" and
                    "output is not in Redis" in r.stderr and r.stderr, 30,
                    "the note on what her account cannot read")
    assert f"the whole log is tpu-a:{stack.attempts(job)[0].log_path}" in said


def test_revoking_a_user_takes_their_broker_account_and_granting_makes_a_new_one(
        guarded_stack, colleagues):
    stack = guarded_stack
    _, bob = colleagues
    his = redis.Redis.from_url(bob.env["TPUQ_BROKER_URL"])
    assert his.ping()
    his.close()
    stack.tpuq("user", "revoke", bob.name)
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(bob.env["TPUQ_BROKER_URL"]).ping()
    out = stack.tpuq("user", "grant", bob.name).stdout
    url = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)["broker_url"]
    assert url != bob.env["TPUQ_BROKER_URL"], "a new password, shown once"
    assert redis.Redis.from_url(url).xrange(logstream.key(bob.name, 1, 1)) == []
