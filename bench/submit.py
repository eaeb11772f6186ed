"""`tpuq submit` through the real CLI, with an agent running (embedded or team).

In the team deployment the CLI on a host hands the job to its agent's socket; with
NO_AGENT (the socket moved away) it is a machine without an agent, which writes
PostgreSQL and rings Celery itself.

- wall time: launching `tpuq submit -q -- /bin/true` until it exits (it prints the id);
- submit->start: from just before launching `tpuq submit` to the moment the job's own
  command runs (the job writes `date +%s.%N` to a file; both clocks are this machine's
  time.time()).

One job at a time: after each sample the bench waits for the job to end, so every
submit meets an empty queue and an idle agent. Each submit sample is paired with a
`python -c pass` run just before it, so the baseline sees the same machine load (on a
shared 2-core VM, other work moves the p95 of both).
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
import time
import uuid
from functools import partial

from bench.embedded import BenchError, EmbeddedStack, wait_for
from bench.stats import summary

WARMUP = 2
NO_AGENT = {"TPUQ_AGENT_SOCKET": "/nonexistent/tpuq-bench/agent.sock"}


def _submit(stack: EmbeddedStack, argv: list[str],
            env: dict[str, str] | None = None) -> tuple[int, float]:
    """(job id, wall ms) of one CLI submit; `env` adds to the stack's environment."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, env={**stack.env, **(env or {})}, cwd=stack.home,
                          capture_output=True, text=True, check=False)
    wall = (time.perf_counter() - t0) * 1000.0
    if done.returncode != 0:
        raise BenchError(f"tpuq submit exited {done.returncode}: {done.stderr.strip()}")
    try:
        return int(done.stdout.strip()), wall
    except ValueError:
        raise BenchError(f"tpuq submit -q printed {done.stdout!r}, not a job id") from None


def _python_pass_ms() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.perf_counter() - t0) * 1000.0


# What any Python client of the agent costs, tpuq's or not: the interpreter, json and
# socket loaded, the request (a plain job, this process's environment in it) encoded and
# sent on the agent's socket, the agent's answer read and decoded. `tpuq submit` above this
# floor is the CLI's own (its modules, settings, the spec it builds).
BARE_CLIENT = """\
import json, os, socket, sys
request = json.loads(sys.argv[1])
request["spec"]["env"] = dict(os.environ)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[2])
s.sendall(json.dumps(request).encode())
s.shutdown(socket.SHUT_WR)
print(json.loads(b"".join(iter(lambda: s.recv(1 << 16), b"")))["id"])
"""

# What a machine with no agent pays before it can write a job with psycopg: the driver
# loaded, a connection made and one statement answered.
BARE_PSYCOPG = """\
import sys
import psycopg
with psycopg.connect(sys.argv[1]) as conn:
    conn.execute("SELECT 1").fetchall()
"""


def client_floor(stack: EmbeddedStack, runs: int) -> dict[str, float]:
    """client_floor_* (BARE_CLIENT on the stack's agent socket), paired with its own
    python -c pass."""
    from tpuq import protocol
    from tpuq.spec import JobSpec

    spec = JobSpec(command=["/bin/true"], cwd=stack.home, owner=getpass.getuser(),
                   team="default").validate().to_dict()
    request = protocol.encode(protocol.Submit(spec=spec)).decode()
    return _paired([sys.executable, "-c", BARE_CLIENT, request, stack.socket_path], stack,
                   runs, "client_floor", job=True)


def psycopg_floor(stack: EmbeddedStack, runs: int) -> dict[str, float]:
    """psycopg_floor_* (BARE_PSYCOPG against the stack's database), paired."""
    url = stack.db_url.replace("postgresql+psycopg://", "postgresql://", 1)
    return _paired([sys.executable, "-c", BARE_PSYCOPG, url], stack, runs, "psycopg_floor",
                   job=False)


def _paired(argv: list[str], stack: EmbeddedStack, runs: int, name: str, job: bool,
            env: dict[str, str] | None = None, paired: str | None = None
            ) -> dict[str, float]:
    """`name`_* of `argv`'s wall time (`job`: it prints a job id, waited for before the
    next sample) and, run just before each, `paired` (default `name`_python_pass_paired)."""
    samples, bases = [], []
    for i in range(WARMUP + runs):
        base = _python_pass_ms()
        if job:
            job_id, wall = _submit(stack, argv, env)
            stack.wait_ended([job_id], timeout=30)
        else:
            t0 = time.perf_counter()
            done = subprocess.run(argv, env={**stack.env, **(env or {})}, cwd=stack.home,
                                  capture_output=True, text=True, check=False)
            wall = (time.perf_counter() - t0) * 1000.0
            if done.returncode != 0:
                raise BenchError(f"{name} exited {done.returncode}: "
                                 f"{done.stderr.strip()[-500:]}")
        if i >= WARMUP:
            samples.append(wall)
            bases.append(base)
    return {**summary(name, samples),
            **summary(paired or f"{name}_python_pass_paired", bases)}


def wall_time(stack: EmbeddedStack, runs: int,
              env: dict[str, str] | None = None) -> dict[str, float]:
    """submit_wall_* and, paired with it, python_pass_paired_*."""
    return _paired(stack.submit_argv(["/bin/true"]), stack, runs, "submit_wall", job=True,
                   env=env, paired="python_pass_paired")


def _read_stamp(path: str) -> float | None:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return float(text) if text.endswith("\n") else None  # `date` writes it in one go


def submit_to_start(stack: EmbeddedStack, runs: int,
                    env: dict[str, str] | None = None) -> dict[str, float]:
    date = shutil.which("date") or "/bin/date"
    samples = []
    for i in range(WARMUP + runs):
        # a name of this sample alone: a stack measured twice (through its agent, then
        # as a machine without one) must not find the last pass's stamp
        stamp = os.path.join(stack.home, f"started-{uuid.uuid4().hex}")
        argv = stack.submit_argv(["/bin/sh", "-c", f"{date} +%s.%N > {stamp}"])
        t0 = time.time()
        job_id, _ = _submit(stack, argv, env)
        started: float = wait_for(partial(_read_stamp, stamp), 30, 0.002,
                                  f"job {job_id} to start")
        stack.wait_ended([job_id], timeout=30)
        if stack.state(job_id) != "succeeded":
            raise BenchError(f"job {job_id} ended {stack.state(job_id)}:\n{stack.log_tail()}")
        if i >= WARMUP:
            samples.append((started - t0) * 1000.0)
    return summary("submit_to_start", samples)
