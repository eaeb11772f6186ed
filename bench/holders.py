"""The device scan before a start (`holders.find_holders`): matched by device, against a
scan of the same processes by path alone (what it did before), interleaved in one run.

It scans every process's open files for `/dev/full`, a character device nobody holds:
the whole cost of a scan that finds the chips free. Prints each median beside the other.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tpuq.agent.tpu import holders  # noqa: E402

ROUNDS = 40
DEVICE = "/dev/full"


def by_path(paths: set[str]) -> list[int]:
    """The scan by path alone: readlink of every fd compared with the device paths."""
    found = []
    for pid in holders._pids("/proc"):
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in paths:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def main() -> None:
    paths = {DEVICE}
    device, path = [], []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        holders.find_holders(paths)
        device.append(time.perf_counter() - t)
        t = time.perf_counter()
        by_path(paths)
        path.append(time.perf_counter() - t)
    n = len(holders._pids("/proc"))
    dev_ms, path_ms = statistics.median(device) * 1e3, statistics.median(path) * 1e3
    print(f"device scan of {n} processes: by device {dev_ms:.1f} ms, "
          f"by path (baseline) {path_ms:.1f} ms, ratio {dev_ms / path_ms:.2f}x")


if __name__ == "__main__":
    main()
