"""tpuq: a job queue for teams sharing Cloud TPU VMs.

Kept import-light on purpose: `from tpuq import job` runs inside training scripts and
must not pull in SQLAlchemy, Celery or JAX.

Packages, from the top layer down (each imports only from those below it; the rule is
tests/unit/test_layers.py):

- `cli/`        the `tpuq` command: thin Click commands over the client
- `pod/`        a pod slice's plumbing over SSH from host 0 (Fabric): run, clean, setup
- `client.py`   asks tpuq: through the host's agent, else the database directly; the
                 Python API (submit(fn), submit_command, submit_many, Job: wait, result,
                 logs, cancel)
- `runfn.py`    what a function job's process runs: the pickled call in, its outcome out
- `agent/`      the per-host daemon: runs jobs as the only owner of their chips
- `api/`        what a caller may ask, authorized: the same handlers for both ways in
- `queue/`      Celery on Redis, the team deployment's doorbell and log streams
- `scheduler/`  the pure placement policy and the leader's pass that applies it
- `state/`      the database: models, the one transition function, all SQL
- `migrations`  Alembic (the repository's top-level migrations/, installed here)

Leaf modules, stdlib only, used by every layer:

- `errors.py`      the root of every tpuq error (`TpuqError`) and the failure kinds
- `records.py`     Record: dataclass-like classes without dataclasses' cost at import
- `settings.py`    every setting and its environment variable, in one place
- `spec.py`        what a person submits, and its validation
- `submitopts.py`  submit options, and the one mapping from them to a spec
- `batch.py`       jobs queued from Python (a call or a command each) as requests
- `announce.py`    agents' notes of the home they serve, for others on the VM
- `arrays.py`      job arrays: the `--array` syntax, one spec per task, `ID_N` refs
- `begin.py`       `--begin` times as SLURM reads them (22:00, +2h, ISO dates)
- `directives.py`  `#TPUQ` lines at the top of a script: submit options
- `outputs.py`     `--output` names (%j, %a) and opening that file as the job's owner
- `shapes.py`      which chip counts a host offers, and libtpu's bounds for each
- `jobenv.py`      the environment a job sees: every variable tpuq sets or removes
- `envinputs.py`   the inputs of one attempt's environment: the host's, and the attempt's own
- `checkpoints.py` where a job's checkpoints live (a shared root, or one host's disk)
- `protocol.py`    the agent socket's typed requests and replies, and their limits
- `framing.py`     a reply as frames of at most 1 MiB: no reply too big to send
- `jobjson.py`     the job object of `status --json` and `show --json`, typed once
- `localclient.py` the client side of that socket
- `terminal.py`    an interactive session's caller side: its pty, raw mode, the copy
- `users.py`       uid -> user name
- `gcpause.py`     the cyclic garbage collector off while modules load, then frozen
- `destinations.py` where notifications may go: nothing on the host, link-local or ours
- `job.py`         the job-side helper (`from tpuq import job`)
"""

__version__ = "0.1.0"
