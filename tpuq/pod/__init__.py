"""A TPU pod slice's plumbing over SSH, from host 0 (`tpuq pod run/clean/setup`).

Fabric is the pod's plumbing, never a second job path: a job still runs through the
queue. These commands fan one command out to every worker, free their TPUs safely, and
install tpuq's team deployment on them.

- `hosts.py`          which workers make up the pod, in order: metadata, hosts file, list
- `ssh.py`            connections (Fabric), one command's output streamed, in parallel
- `run.py`            one command on every worker: prefixed output, timeout, fail-fast kill
- `clean.py`          freeing every worker's TPU: through its agent, else in place
- `provision.py`      a pod to a team deployment in one idempotent command (`pod setup`)
- `services.sh`       Redis and PostgreSQL on host 0 (run by provision.py)
- `startup-script.sh` the deployment kit's startup script (a link to workers/), shipped
"""
