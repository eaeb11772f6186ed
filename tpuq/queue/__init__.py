"""Celery on Redis: the team deployment's doorbell (never the truth: DESIGN.md).

- `app.py`        the Celery app, task names, host queues, the control broadcast
- `doorbell.py`   start an attempt on a host; wake every agent; wake the leader
- `tasks.py`      what the tasks do, through the agent's `Host` protocol
- `worker.py`     the agent's in-process Celery worker (threads pool)
- `logstream.py`  job output shipped to capped Redis streams, and read back
- `accounts.py`   users' broker accounts: each reads their own jobs' log streams, no more
"""
