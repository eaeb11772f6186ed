"""The host agent: one per TPU host (DESIGN.md "The agent").

Its modules sit in groups by what they do; each group's __init__ maps its modules.
The TPU and GCE groups know nothing of attempts, keepers or the socket
(tests/unit/test_layers.py holds them to it).

- `tpu/`       the TPU and who owns it: device files, holders, libtpu, chip locks, probes
- `gce/`       what the GCE metadata server says: notices, and this host's slice
- `attempts/`  running attempts: executor, supervisor, gang, deadlines, how they ended
- `keeper/`    the keeper process that owns a job, and the agent's link to it
- `local/`     the agent's Unix socket: requests from its own VM, sessions' terminals
- `duties/`    periodic duties beside the jobs: log budgets, notifications

And, beside the groups:

- `main.py`        the daemon: wiring of the pieces, and the stop sequence
- `signals.py`     clean signal state for children; stop signals for the main loop
- `pidlock.py`     one agent per host name and state directory
- `errors.py`      AgentError: the agent cannot start, and why; HostUnfit (exit 78)
- `exits.py`       how a process ended, in words; TPU start-up failures in its output
                   (read by attempts/ for an attempt, by tpu/probes.py for a probe)
- `recovery.py`    at start: requeue what this host owned, kill its orphans
- `handover.py`    SIGUSR2: running jobs left to their keepers, waiting for a new agent
- `teamlink.py`    team deployment: the Celery consumer (restarted if stopped), wake-ups
                   from the database, log shipping, users' broker accounts
- `reserve.py`     disk room kept to record outcomes when the disk fills
"""
