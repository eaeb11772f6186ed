"""Job turnover: how fast the agent gets through a queue of trivial jobs.

A blocker job (`cat` on a FIFO: it waits without polling) holds the whole host while
N `/bin/true` jobs are queued behind it with `stack.queue_jobs` (embedded: the agent's
socket; team deployment: the state API in one transaction, then one ring through
Redis). Then the FIFO is
opened for writing and closed, `cat` sees end-of-file and exits, and the figure is
(last job's ended_at - blocker's ended_at) / N, read from the database. Jobs take the
whole host by default, so they run one at a time.
"""

from __future__ import annotations

import errno
import os
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from bench import baselines
from bench.embedded import BenchError, EmbeddedStack, wait_for
from bench.stats import percentile


def _release(fifo: str, timeout: float = 10.0) -> None:
    """Open the FIFO for writing (once `cat` has it open for reading) and close it."""
    def opened() -> int | None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no reader yet
                return None
            raise
    fd = wait_for(opened, timeout, 0.002, "the blocker job to open its FIFO")
    os.close(fd)


def turnover(stack: EmbeddedStack, jobs: int,
             around_release: Callable[[], AbstractContextManager[object]] = nullcontext,
             ) -> dict[str, float]:
    """Figures of one round; `around_release` wraps the timed part (e.g. a profiler)."""
    fifo = os.path.join(stack.home, "release.fifo")
    os.mkfifo(fifo)
    [blocker], _ = stack.queue_jobs(["/bin/cat", fifo], 1)
    stack.wait_state(blocker, "running", timeout=30)

    ids, submit_ms_per_job = stack.queue_jobs(["/bin/true"], jobs)
    time.sleep(0.2)  # let the wake-ups from those submits settle before the clock starts
    if stack.state(blocker) != "running":
        raise BenchError(f"blocker job {blocker} is {stack.state(blocker)}, not running")

    with around_release():
        cpu0 = stack.agent_cpu_s()
        _release(fifo)
        stack.wait_ended([blocker, *ids], timeout=max(60.0, jobs * 1.0), interval=0.05)
        cpu_ms = (stack.agent_cpu_s() - cpu0) * 1000.0

    file_create_ms = baselines.file_create_ms(stack.home)  # the agent idle again
    rows = stack.jobs([blocker, *ids])
    bad = {i: st for i, (st, _) in rows.items() if st != "succeeded"}
    if bad:
        raise BenchError(f"jobs did not succeed: {dict(list(bad.items())[:5])}"
                         f"\nagent log:\n{stack.log_tail()}")
    ended = {i: end for i, (_, end) in rows.items() if end is not None}
    if len(ended) != len(rows):
        raise BenchError("a finished job has no ended_at")
    blocker_end = ended[blocker]
    ends = sorted(ended[i] for i in ids)
    total = (ends[-1] - blocker_end) * 1000.0
    gaps = [(b - a) * 1000.0 for a, b in zip([blocker_end, *ends], ends, strict=False)]
    return {
        "turnover_jobs": float(jobs),
        "turnover_total_ms": total,
        "turnover_ms_per_job": total / jobs,
        "turnover_gap_p50_ms": statistics.median(gaps),
        "turnover_gap_p95_ms": percentile(gaps, 95),
        "turnover_gap_max_ms": max(gaps),
        "turnover_agent_cpu_ms_per_job": cpu_ms / jobs,
        "socket_submit_ms_per_job": submit_ms_per_job,
        "turnover_file_create_ms": file_create_ms,
    }


def median_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds, plus the worst round's ms per job."""
    out = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    out["turnover_rounds"] = float(len(rounds))
    out["turnover_ms_per_job_max"] = max(r["turnover_ms_per_job"] for r in rounds)
    return out
