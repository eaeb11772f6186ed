"""`tpuq status` with 10,000 jobs in the table, through the host's agent and without one.

The table holds JOBS jobs: all but OPEN of them ended (succeeded), OPEN still queued
behind a job that holds the host, so the listing shows the open jobs with their
waiting reasons and the newest ended ones. Each `tpuq status` (the real CLI, a
subprocess) is paired with a `python -c pass` run just before it, so the baseline sees
the same machine load.

- through the agent: the CLI asks the host's agent over its socket, the default on a
  host (no SQLAlchemy in the CLI process);
- direct: the socket moved away (a laptop, or a login VM), the CLI reads the database
  itself.
"""

from __future__ import annotations

import subprocess
import sys
import time

from bench.embedded import BenchError, EmbeddedStack
from bench.stats import summary
from bench.submit import NO_AGENT

JOBS = 10_000
OPEN = 50
WARMUP = 2


def fill(stack: EmbeddedStack, jobs: int = JOBS, open_jobs: int = OPEN) -> None:
    """A host-holding job, `open_jobs` queued behind it, the rest ended."""
    from sqlalchemy import update

    from tpuq.state.models import Job

    fifo_holder = ["/bin/sleep", "3600"]
    [holder], _ = stack.queue_jobs(fifo_holder, 1)
    stack.wait_state(holder, "running", timeout=30)
    ended, _ = stack.insert_jobs(["/bin/true"], jobs - open_jobs - 1)
    with stack.db.write() as s:  # the setup of a table, not state changes under test
        s.execute(update(Job).where(Job.id.in_(ended))
                  .values(state="succeeded", ended_at=time.time(), reason="exited 0"))
    stack.insert_jobs(["/bin/true"], open_jobs)


def _run(argv: list[str], env: dict[str, str], cwd: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    ms = (time.perf_counter() - t0) * 1000.0
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv[-2:])} exited {done.returncode}: {done.stderr[-500:]}")
    return ms


def measure(stack: EmbeddedStack, runs: int) -> dict[str, float]:
    from bench.embedded import TPUQ

    out: dict[str, float] = {}
    # direct: no agent answers, and the shell names the database (else it would mean the
    # host agent's queue and refuse to fall back: client.py)
    direct = {**NO_AGENT, "TPUQ_DATABASE_URL": stack.db_url}
    for prefix, extra in (("status_agent", {}), ("status_direct", direct)):
        env = {**stack.env, **extra}
        samples, paired = [], []
        for i in range(WARMUP + runs):
            base = _run([sys.executable, "-c", "pass"], env, stack.home)
            ms = _run([TPUQ, "status"], env, stack.home)
            if i >= WARMUP:
                samples.append(ms)
                paired.append(base)
        out.update(summary(prefix, samples))
        out.update(summary(f"{prefix}_python_pass_paired", paired))
    return out


def side_by_side(stack: EmbeddedStack, runs: int, base: str,
                 this: str | None = None) -> dict[str, float]:
    """`tpuq status` of this tree and of the tree at `base` (an unpacked `git archive` of
    another commit's tpuq/ and migrations/), interleaved run by run on the same table and
    agent; p50 of each and their ratio (this tree / base). `this`: this tree unpacked
    the same way, so both look their imports up through one more directory alike."""
    from bench.embedded import TPUQ

    out: dict[str, float] = {}
    direct = {**NO_AGENT, "TPUQ_DATABASE_URL": stack.db_url}
    for prefix, extra in (("status_agent", {}), ("status_direct", direct)):
        env = {**stack.env, **extra}
        old_env = {**env, "PYTHONPATH": base}  # the CLI runs from the home: base's tpuq wins
        if this is not None:
            env = {**env, "PYTHONPATH": this}
        new, old = [], []
        for i in range(WARMUP + runs):
            # which goes first alternates: neither gets the other's warm caches every time
            first, second = (old_env, env) if i % 2 else (env, old_env)
            ms_first = _run([sys.executable, TPUQ, "status"], first, stack.home)
            ms_second = _run([sys.executable, TPUQ, "status"], second, stack.home)
            ms_old, ms_new = (ms_first, ms_second) if i % 2 else (ms_second, ms_first)
            if i >= WARMUP:
                new.append(ms_new)
                old.append(ms_old)
        out.update(summary(f"{prefix}_this", new))
        out.update(summary(f"{prefix}_base", old))
        out[f"{prefix}_p50_ratio"] = round(out[f"{prefix}_this_p50_ms"]
                                           / out[f"{prefix}_base_p50_ms"], 3)
    return out


def run(runs: int, keep: bool = False, jobs: int = JOBS) -> dict[str, float]:
    with EmbeddedStack(keep=keep) as stack:
        fill(stack, jobs)
        return measure(stack, runs)


if __name__ == "__main__":
    # bench/status.py [RUNS] [BASE_TREE [THIS_TREE]]: with a base tree, this tree and it
    # side by side (trees: `git archive COMMIT tpuq migrations | tar -x -C DIR`)
    import json

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if len(sys.argv) > 2:
        with EmbeddedStack() as bench_stack:
            fill(bench_stack)
            print(json.dumps(side_by_side(bench_stack, n, sys.argv[2],
                                          sys.argv[3] if len(sys.argv) > 3 else None),
                             indent=2))
    else:
        print(json.dumps(run(n), indent=2))
