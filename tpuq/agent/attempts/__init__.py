"""Running attempts: from a doorbell to a recorded outcome.

- `executor.py`    assigned attempts in, supervisors out; the TPU must be ours first
- `spec.py`        what the agent needs of one attempt to run it (AttemptSpec)
- `supervisor.py`  one attempt, the agent's half: launch, lease, stop, outcome
- `gang.py`        one worker's task of a slice job: start barrier, gang stop, its end
- `deadlines.py`   when an attempt renews, is asked to stop, is killed (pure)
- `outcome.py`     how an attempt ended, and recording it (whoever records it)
- `identity.py`    whose account a job runs as (TPUQ_RUN_AS)
- `functionjob.py` a function job's call written before its start, its outcome stored after
- `workdirs.py`    a job's log and checkpoint directories, claimed per database
"""
