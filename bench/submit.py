"""`tpuq submit` through the real CLI, with an embedded agent running.

- wall time: launching `tpuq submit -q -- /bin/true` until it exits (it prints the id);
- submit->start: from just before launching `tpuq submit` to the moment the job's own
  command runs (the job writes `date +%s.%N` to a file; both clocks are this machine's
  time.time()).

One job at a time: after each sample the bench waits for the job to end, so every
submit meets an empty queue and an idle agent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from bench.embedded import BenchError, EmbeddedStack, wait_for
from bench.stats import summary

WARMUP = 2


def _submit(stack: EmbeddedStack, argv: list[str]) -> tuple[int, float]:
    """(job id, wall ms) of one CLI submit."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=stack.env, cwd=stack.home, capture_output=True, text=True)
    wall = (time.perf_counter() - t0) * 1000.0
    if done.returncode != 0:
        raise BenchError(f"tpuq submit exited {done.returncode}: {done.stderr.strip()}")
    try:
        return int(done.stdout.strip()), wall
    except ValueError:
        raise BenchError(f"tpuq submit -q printed {done.stdout!r}, not a job id") from None


def wall_time(stack: EmbeddedStack, runs: int) -> dict[str, float]:
    argv = stack.submit_argv(["/bin/true"])
    samples = []
    for i in range(WARMUP + runs):
        job_id, wall = _submit(stack, argv)
        stack.wait_ended([job_id], timeout=30)
        if i >= WARMUP:
            samples.append(wall)
    return summary("submit_wall", samples)


def _read_stamp(path: str) -> float | None:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return float(text) if text.endswith("\n") else None  # `date` writes it in one go


def submit_to_start(stack: EmbeddedStack, runs: int) -> dict[str, float]:
    date = shutil.which("date") or "/bin/date"
    samples = []
    for i in range(WARMUP + runs):
        stamp = os.path.join(stack.home, f"started-{i}")
        argv = stack.submit_argv(["/bin/sh", "-c", f"{date} +%s.%N > {stamp}"])
        t0 = time.time()
        job_id, _ = _submit(stack, argv)
        started = wait_for(lambda p=stamp: _read_stamp(p), 30, 0.002,
                           f"job {job_id} to start")
        stack.wait_ended([job_id], timeout=30)
        if stack.state(job_id) != "succeeded":
            raise BenchError(f"job {job_id} ended {stack.state(job_id)}:\n{stack.log_tail()}")
        if i >= WARMUP:
            samples.append((started - t0) * 1000.0)
    return summary("submit_to_start", samples)
