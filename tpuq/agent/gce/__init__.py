"""What Google Compute Engine says about this host.

Below attempts/, keeper/ and local/: nothing here imports them (tests/unit/test_layers.py).

- `metadata.py`    GCE metadata watcher: typed maintenance/preemption notices
- `notices.py`     when notices take the host out of service and give it back
- `topology.py`    which multi-host slice this host is a worker of (settings, metadata)
"""
