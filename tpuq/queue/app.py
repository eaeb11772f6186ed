"""The Celery app: task names, host queues, the shared control queue.

Celery is the doorbell, never the truth (DESIGN.md): a message only says "look at job
J, attempt A". Early acks, no results, prefetch 1, a threads pool (prefork forks, and
JAX must never be forked), no ETA: whether a job runs is decided by the database.

`celery -A tpuq.queue.app inspect tpuq_slots` lists each host's chips and the attempt
holding each; `inspect active` lists the attempts a `tpuq.run` message started (its
task stays active for as long as the attempt runs: every host's but the leader's own,
which it starts without a message); Flower works against the same app.
"""

from __future__ import annotations

from celery import Celery
from kombu.common import Broadcast

from tpuq import settings as settings_mod

RUN_TASK = "tpuq.run"
WAKE_TASK = "tpuq.wake"  # broadcast: every agent looks (schedule, stop requests)
CONTROL_QUEUE = "tpuq.control"  # the fanout exchange and its routing key
SCHEDULE_TASK = "tpuq.schedule"  # broadcast: only the scheduler leader acts
LEAD_TASK = "tpuq.lead"  # broadcast: the leader let go; whoever takes the lease leads


def host_queue(host: str) -> str:
    return f"tpuq.host.{host}"


def control_queue() -> Broadcast:
    """A fanout exchange named tpuq.control; each agent binds its own private queue."""
    return Broadcast(CONTROL_QUEUE)  # type: ignore[no-untyped-call]  # kombu is untyped


def control_queue_name(app: Celery) -> str:
    """The private name this process's app gave its broadcast queue (bcast.<uuid>)."""
    return str(next(n for n, q in app.amqp.queues.items() if q.exchange.name == CONTROL_QUEUE))


def make_app(broker_url: str, visibility_timeout_s: float = 3600.0) -> Celery:
    app = Celery("tpuq", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=False,  # ack on receipt: Redis must never re-deliver a running job
        task_ignore_result=True,
        result_backend=None,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=CONTROL_QUEUE,
        # every agent hears the control queue: a wake-up reaches whichever agent leads
        task_queues=[control_queue()],
        task_create_missing_queues=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        broker_connection_timeout=2.0,
        # a doorbell that cannot be delivered is not retried for long: agents poll
        task_publish_retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.5,
                                   "interval_max": 0.5},
        broker_transport_options={"visibility_timeout": visibility_timeout_s,
                                  "socket_connect_timeout": 2, "socket_timeout": 5},
        worker_hijack_root_logger=False,
        # task events cost three extra publishes per job; Flower switches them on by
        # itself (its enable_events control command) while it watches
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_enable_remote_control=True,
    )
    from tpuq.queue import tasks

    for name, fn in ((RUN_TASK, tasks.run), (WAKE_TASK, tasks.wake),
                     (SCHEDULE_TASK, tasks.schedule), (LEAD_TASK, tasks.lead)):
        app.task(name=name, ignore_result=True, acks_late=False)(fn)
    return app


def _module_app() -> Celery:
    cfg = settings_mod.load()
    return make_app(cfg.broker_url or "redis://127.0.0.1:6379/0", cfg.broker_visibility_s)


# `celery -A tpuq.queue.app ...` and the agent's worker use this one
app = _module_app()
