"""Docker HEALTHCHECK for the worker image: is an agent alive in this container?

Needs neither the database nor the broker (a database outage must not make Docker
restart every agent and preempt every job). The agent holds an exclusive flock on
$TPUQ_HOME/agent-<host>.pid for as long as it runs (tpuq/agent/main.py); if we can take
that lock, nobody holds it and the agent is gone or never started.
Exit 0 = healthy, 1 = unhealthy.
"""

import fcntl
import glob
import os
import sys


def agent_alive(home: str) -> bool:
    for path in glob.glob(os.path.join(home, "agent-*.pid")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # held: an agent runs
        finally:
            os.close(fd)  # closing drops the lock if we took it
    return False


if __name__ == "__main__":
    sys.exit(0 if agent_alive(os.environ.get("TPUQ_HOME", "/var/lib/tpuq")) else 1)
