"""The host's TPU and who owns it: no job starts until the chips are ours.

Below attempts/, keeper/ and local/: nothing here imports them (tests/unit/test_layers.py).

- `devices.py`     TPU device files, PCI ids and the host's TPU type; chips refused
- `holders.py`     who holds the TPU (/proc), and killing verified processes
- `devwatch.py`    inotify on the device files (skips the /proc scan when quiet)
- `libtpu.py`      stale libtpu lock and log-dir cleanup
- `chiplocks.py`   per-chip flock files
- `cleanup.py`     freeing the TPU on request (`tpuq pod clean`): holders named, stale lock gone
- `probes.py`      every chip shape proven on the host before it is offered
"""
