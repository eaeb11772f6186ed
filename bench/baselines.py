"""Yardsticks for this machine, measured in the same run as the tpuq figures.

- fork/exec of /bin/true through subprocess.run: the cost of starting any process;
- `python -c pass` with the venv interpreter: the floor of any Python CLI;
- N sequential subprocess.run(['/bin/true']) in one loop: the floor of job turnover;
- creating a file in a directory: what each file an attempt makes costs on that
  filesystem now (on a VM this moves tenfold from one minute to the next).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench.stats import summary, time_ms

TRUE = "/bin/true"


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True)


def fork_exec(runs: int) -> dict[str, float]:
    return summary("fork_exec_true", time_ms(lambda: _run([TRUE]), runs))


def python_start(runs: int) -> dict[str, float]:
    return summary("python_pass", time_ms(lambda: _run([sys.executable, "-c", "pass"]), runs))


def sequential_true(jobs: int) -> dict[str, float]:
    """Wall time of `jobs` back-to-back /bin/true runs, per job."""
    _run([TRUE])
    t0 = time.perf_counter()
    for _ in range(jobs):
        _run([TRUE])
    total = (time.perf_counter() - t0) * 1000.0
    return {"bare_turnover_total_ms": total, "bare_turnover_ms_per_job": total / jobs}


def file_create_ms(directory: str, files: int = 100) -> float:
    """Median wall time of creating (and closing) one new file in a fresh subdirectory
    of `directory`, removed afterwards."""
    sub = tempfile.mkdtemp(prefix="fs-probe-", dir=directory)
    took = []
    try:
        for i in range(files):
            path = os.path.join(sub, str(i))
            t0 = time.perf_counter()
            with open(path, "ab"):
                pass
            took.append((time.perf_counter() - t0) * 1000.0)
    finally:
        shutil.rmtree(sub)
    return statistics.median(took)
