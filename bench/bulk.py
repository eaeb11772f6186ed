"""The agent's socket at bulk sizes: `tpuq status` of 10,000 open jobs (held array tasks
of ten accounts: a reply of several frames) through the agent and direct, and
`tpuq cancel --array` of 20,000 tasks; beside them, in the same run, the set-based cancel
against the one-job-at-a-time one on the same number of tasks.

Each `tpuq status` (the real CLI, a subprocess) is paired with a `python -c pass` run
just before it, so the baseline sees the same machine load.

    .venv/bin/python -m bench.bulk [RUNS [OPEN_JOBS]]
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time
from typing import Any

from bench.embedded import TPUQ, BenchError, EmbeddedStack
from bench.stats import summary
from bench.submit import NO_AGENT

OPEN = 10_000
ACCOUNTS = 10
CANCELLED = 20_000
PAIR = 2_000  # tasks cancelled both ways, in process, for the side-by-side ratio
WARMUP = 1


def _held_array(stack: EmbeddedStack, n: int, owner: str) -> list[int]:
    from tpuq import arrays
    from tpuq.spec import JobSpec
    from tpuq.state import jobs

    spec = JobSpec(command=["/bin/true"], cwd=stack.home, owner=owner, team="default",
                   chips=1).validate()
    with stack.db.write() as s:
        return jobs.submit_array(s, arrays.checked_tasks(spec, list(range(n)), []), None,
                                 actor=owner, held=True)


def _run(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    ms = (time.perf_counter() - t0) * 1000.0
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv[-3:])} exited {done.returncode}: {done.stderr[-500:]}")
    return ms, done.stdout


def status_times(stack: EmbeddedStack, runs: int) -> dict[str, float]:
    out: dict[str, float] = {}
    direct = {**NO_AGENT, "TPUQ_DATABASE_URL": stack.db_url}
    for prefix, extra, argv in (("status_agent", {}, [TPUQ, "status"]),
                                ("status_json_agent", {}, [TPUQ, "status", "--json"]),
                                ("status_direct", direct, [TPUQ, "status"])):
        env = {**stack.env, **extra}
        samples, paired = [], []
        for i in range(WARMUP + runs):
            base, _ = _run([sys.executable, "-c", "pass"], env, stack.home)
            ms, _ = _run(argv, env, stack.home)
            if i >= WARMUP:
                samples.append(ms)
                paired.append(base)
        out.update(summary(prefix, samples))
        out[f"{prefix}_python_pass_p50_ms"] = summary("p", paired)["p_p50_ms"]
    return out


def cancel_times(stack: EmbeddedStack) -> dict[str, float]:
    from tpuq.state import jobs

    me = getpass.getuser()
    tasks = _held_array(stack, CANCELLED, me)
    ms, stdout = _run([TPUQ, "cancel", "--array", str(tasks[0]), "--json"], stack.env,
                      stack.home)
    done = json.loads(stdout)
    if len(done) != CANCELLED or not all(r["ok"] for r in done):
        raise BenchError("cancel --array did not cancel every task")
    one, bulk = _held_array(stack, PAIR, me), _held_array(stack, PAIR, me)
    t0 = time.perf_counter()
    with stack.db.write() as s:
        for j in one:
            jobs.cancel(s, j, me)
    one_ms = (time.perf_counter() - t0) * 1000.0
    t0 = time.perf_counter()
    with stack.db.write() as s:
        jobs.act_on_many(s, "cancel", bulk, me)
    bulk_ms = (time.perf_counter() - t0) * 1000.0
    return {"cancel_array_20k_cli_ms": ms,
            "cancel_2k_one_by_one_ms": one_ms, "cancel_2k_set_based_ms": bulk_ms,
            "set_based_over_one_by_one": bulk_ms / one_ms}


def run(runs: int, open_jobs: int = OPEN) -> dict[str, Any]:
    with EmbeddedStack() as stack:
        for i in range(ACCOUNTS):
            _held_array(stack, open_jobs // ACCOUNTS, f"user{i}")
        out: dict[str, Any] = {"open_jobs": open_jobs}
        out.update(status_times(stack, runs))
        out.update(cancel_times(stack))
        return out


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 5,
                         int(sys.argv[2]) if len(sys.argv) > 2 else OPEN), indent=2))
