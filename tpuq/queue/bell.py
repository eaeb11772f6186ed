"""The wake-up broadcast without Celery: what a machine with no agent (a laptop, a login
VM) rings after it changed the queue, with redis-py alone.

Importing Celery and building its app costs a command about 0.3 s and a few dozen MB;
a wake-up is one message on the control exchange, which on Redis is one PUBLISH. This
writes the message Celery itself writes for `doorbell.wake_agents()` (task protocol 2,
kombu's envelope, its fanout channel `/<db>.tpuq.control/tpuq.control`): the agents'
Celery consumers cannot tell the two apart. tests/unit/test_bell.py compares the two
messages field by field, so a Celery or kombu upgrade that changes the format fails
there, not silently in a deployment.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import uuid
from typing import Any

log = logging.getLogger("tpuq.queue")
# named here, Celery-free; queue/app.py takes them from here
CONTROL = "tpuq.control"  # the fanout exchange and its routing key
WAKE_TASK = "tpuq.wake"
# the task's (args, kwargs, embed) in Celery's protocol 2
_BODY = base64.b64encode(json.dumps(
    [[], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
).encode()).decode()


def channel(db: int) -> str:
    """kombu's Redis fanout channel for the control exchange (keyprefix_fanout,
    fanout_patterns on)."""
    return f"/{db}.{CONTROL}/{CONTROL}"


def wake_message(task: str = WAKE_TASK) -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    return {
        "body": _BODY,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py", "task": task, "id": task_id, "shadow": None, "eta": None,
            "expires": None, "group": None, "group_index": None, "retries": 0,
            "timelimit": [None, None], "root_id": task_id, "parent_id": None,
            "argsrepr": "()", "kwargsrepr": "{}",
            "origin": f"gen{os.getpid()}@{socket.gethostname()}", "ignore_result": None,
            "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {}},
        "properties": {
            "correlation_id": task_id, "reply_to": str(uuid.uuid4()), "delivery_mode": 2,
            "delivery_info": {"exchange": CONTROL, "routing_key": CONTROL},
            "priority": 0, "body_encoding": "base64", "delivery_tag": str(uuid.uuid4())},
    }


def wake_agents(broker_url: str) -> bool:
    """Wake every agent (as doorbell.wake_agents does); False, logged, when the broker
    is away: agents poll."""
    import redis

    try:
        client = redis.Redis.from_url(broker_url, socket_connect_timeout=2, socket_timeout=5)
        try:
            db = int(client.connection_pool.connection_kwargs.get("db", 0))
            client.publish(channel(db), json.dumps(wake_message()))
        finally:
            client.close()
        return True
    except (redis.RedisError, OSError, ValueError) as e:
        log.warning("%s not delivered (%s); agents will poll", WAKE_TASK, e)
        return False
