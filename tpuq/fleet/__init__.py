"""The fleet: the TPU VMs a team declares, kept alive by one controller off the VMs.

- `spec.py`        the slot file: what is declared, checked; node ids and host names
- `states.py`      every Cloud TPU API state (node, health, queued resource) and its verdict
- `port.py`        the controller's view of the API: plain values, error kinds
- `gcp.py`         the real adapter: google-cloud-tpu v2, REST, endpoint configurable
- `reconcile.py`   the pure decision per slot member: what to record, what to call
- `records.py`     where decisions are kept (the database), fenced by the leader lease
- `store.py`       the fleet's rows; a lost VM's hosts marked lost, their jobs requeued
- `controller.py`  one step over the fleet, and the loop under the leader lease
- `report.py`      one line per VM for people (`tpuq fleet status`, `tpuq status`)
- `costs.py`       chip-hours provisioned against chip-hours used by jobs
"""
