"""The host agent: one per TPU host (DESIGN.md "The agent").

- `main.py`        wiring of the pieces below, and the stop sequence
- `signals.py`     clean signal state for children; stop signals for the main loop
- `pidlock.py`     one agent per host name and state directory
- `errors.py`      AgentError: the agent cannot start, and why; HostUnfit (exit 78)
- `recovery.py`    at start: requeue what this host owned, kill its orphans
- `executor.py`    assigned attempts in, supervisors out; the TPU must be ours first
- `attempt.py`     what the agent needs of one attempt to run it (AttemptSpec)
- `supervisor.py`  one attempt, the agent's half: launch, lease, stop, outcome
- `terminals.py`   sessions' terminals (`tpuq run`), from their caller to their start
- `handover.py`    SIGUSR2: running jobs left to their keepers, waiting for a new agent
- `gang.py`        one worker's task of a slice job: start barrier, gang stop, its end
- `topology.py`    which multi-host slice this host is a worker of (settings, metadata)
- `keeper.py`      one attempt's keeper: owns the job, outlives the agent, fences it
- `keepers.py`     the agent's side of its keepers: launch, talk, adopt
- `outcome.py`     how an attempt ended, and recording it (whoever records it)
- `deadlines.py`   when an attempt renews, is asked to stop, is killed (pure)
- `chiplocks.py`   per-chip flock files
- `devices.py`     TPU device files, PCI ids and the host's TPU type; chips refused
- `probes.py`      every chip shape proven on the host before it is offered
- `devwatch.py`    inotify on the device files (skips the /proc scan when quiet)
- `holders.py`     who holds the TPU (/proc), and killing verified processes
- `libtpu.py`      stale libtpu lock and log-dir cleanup
- `cleanup.py`     freeing the TPU on request (`tpuq pod clean`): holders named, stale lock gone
- `identity.py`    whose account a job runs as (TPUQ_RUN_AS)
- `exits.py`       how a process ended, in words; TPU start-up failures in its output
- `metadata.py`    GCE metadata watcher: typed maintenance/preemption notices
- `notices.py`     when notices take the host out of service and give it back
- `localsock.py`   the Unix socket server (bytes <-> typed messages, SO_PEERCRED)
- `localapi.py`    what the agent does for a request from its own VM
- `tickers.py`     small guarded periodic duties
- `teamlink.py`    team deployment: the Celery consumer (restarted if stopped), wake-ups
                   from the database, log shipping, users' broker accounts
- `notifier.py`    tells owners what became of their jobs (the outbox's sender)
- `courier.py`     one notification's delivery (Apprise) in a process of its own, where
                   every connection is checked against where notifications may go
- `functionjob.py` a function job's call written before its start, its outcome stored after
- `workdirs.py`    a job's log and checkpoint directories, claimed per database
- `reserve.py`     disk room kept to record outcomes when the disk fills
- `logkeeper.py`   job logs within budgets: retention, per-user totals, streams, low disk
"""
