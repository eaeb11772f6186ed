"""The agent's Unix socket: callers on its own VM.

- `server.py`      the socket server (bytes <-> typed messages, SO_PEERCRED)
- `api.py`         what the agent does for a request from its own VM
- `terminals.py`   sessions' terminals (`tpuq run`), from their caller to their start
"""
