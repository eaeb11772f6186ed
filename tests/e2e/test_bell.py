"""A machine with no agent rings the agents without Celery: redis-py publishes the very
message Celery would, and a job submitted from such a machine starts although every
agent's scheduler polls only hourly."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import redis

from tests.e2e.test_team import LAPTOP
from tests.harness import TPUQ
from tpuq.queue import bell

# what differs between two messages by nature: fresh ids, the sender
VARYING = {"id", "root_id", "correlation_id", "reply_to", "delivery_tag", "origin"}


def shape(msg: Any) -> Any:
    if isinstance(msg, dict):
        return {k: "*" if k in VARYING else shape(v) for k, v in msg.items()}
    return msg


def published(url: str, send) -> tuple[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The channel and message one call of `send` publishes."""
    client = redis.Redis.from_url(url)
    sub = client.pubsub()
    sub.psubscribe("*")
    assert sub.get_message(timeout=5)["type"] == "psubscribe"
    done = threading.Event()
    threading.Thread(target=lambda: (send(), done.set()), daemon=True).start()
    msg = sub.get_message(timeout=10)
    while msg is not None and msg["type"] != "pmessage":
        msg = sub.get_message(timeout=10)
    assert msg is not None and done.wait(10)
    sub.close()
    client.close()
    return msg["channel"].decode(), json.loads(msg["data"])


def test_the_bell_publishes_what_celery_publishes(redis_server):
    from tpuq.queue.app import CONTROL_QUEUE, WAKE_TASK, control_queue, make_app

    url = redis_server.url
    app = make_app(url)
    exchange = control_queue().exchange
    theirs = published(url, lambda: app.send_task(
        WAKE_TASK, exchange=exchange, routing_key=CONTROL_QUEUE, declare=[exchange]))
    ours = published(url, lambda: bell.wake_agents(url))
    assert ours[0] == theirs[0]
    assert shape(ours[1]) == shape(theirs[1])


def test_a_submit_from_a_machine_without_an_agent_rings_without_importing_celery(
        team_stack, host):
    team_stack.start_agent(host, TPUQ_POLL_S="3600")  # only a wake-up makes it schedule
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", *TPUQ[1:], "submit", "-q", "--", "/bin/true"],
        env=team_stack.env(**LAPTOP), capture_output=True, text=True, timeout=60)
    assert traced.returncode == 0, traced.stderr
    modules = {line.rsplit("|", 1)[-1].strip() for line in traced.stderr.splitlines()}
    assert "redis" in modules and not {"celery", "kombu"} & modules
    team_stack.wait_state(int(traced.stdout.split()[-1]), "succeeded", timeout=30)
