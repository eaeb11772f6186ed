"""What a caller may ask of tpuq: one handler per request (tpuq/protocol.py), each
authorized for the caller, all over the same state functions.

The agent serves these on its socket (agent/local/api.py) for callers the kernel names;
the client (tpuq/client.py) runs them in its own process when no agent of its
deployment answers, as a caller the database names.

- `caller.py`    who asks, whether an admin, and the refusals
- `handlers.py`  the Api: one method per request
- `objects.py`   rows as the JSON objects the CLI prints (secrets masked)
- `logs.py`      a job's output from where it is (its host's file, or Redis)
"""
