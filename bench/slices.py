"""Slice-job figures: how fast a gang starts, stops on a failure, and requeues on a notice.

    .venv/bin/python bench/slices.py                  # 4 workers, 3 rounds, embedded
    .venv/bin/python bench/slices.py --workers 16 --rounds 2 --json

N agents on fake 4-chip hosts form a fake slice (v4-32 for 4 workers, v4-128 for 16) on
one machine, embedded deployment (SQLite, the test harness's 3 s lease: a worker renews
every second). Per round:

- start: `tpuq submit` -> the last worker's process started (its `gang_workers.started_at`;
  the database clock, the machine's own);
- failure: worker 1's process SIGKILLed -> every worker's end recorded;
- notice: a maintenance notice on the last worker's fake metadata server -> the job
  back in the queue (the whole gang stopped, signal and grace included).

Uses tests/harness.py (real `tpuq agent` processes) and tests/fixtures/gang_task.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from tests.fakes.metadata_server import FakeMetadata  # noqa: E402
from tests.harness import FakeHost, Stack, fixture_cmd, wait_for  # noqa: E402
from tpuq.state.models import GangWorker  # noqa: E402

TYPES = {4: "v4-32", 8: "v4-64", 16: "v4-128"}


def rows(stack: Stack, job: int, attempt: int) -> list[GangWorker]:
    with stack.db.read() as s:
        return list(s.query(GangWorker).filter_by(job_id=job, attempt=attempt))


def one_round(tmp: Path, n: int) -> dict[str, float]:
    stack = Stack(home=tmp / "home")
    md = FakeMetadata().__enter__()
    try:
        for i in range(n):
            env = {"TPUQ_SLICE_NAME": "bench", "TPUQ_SLICE_WORKER": str(i),
                   "TPUQ_SLICE_TYPE": TYPES[n]}
            if i:
                env["TPUQ_AGENT_SOCKET"] = str(tmp / f"w{i}.sock")
            if i == n - 1:
                env["TPUQ_METADATA_URL"] = md.url
            stack.start_agent(FakeHost(tmp / f"w{i}", name=f"bench-w{i}", chips=4), **env)
        figures = {}
        for what in ("start", "failure", "notice"):
            out = tmp / f"out-{what}"
            out.mkdir()
            job = stack.submit("--tpu-type", TYPES[n], "--grace", "10",
                               *fixture_cmd("gang_task.py", out, "hang"))
            wait_for(lambda job=job: sum(1 for g in rows(stack, job, 1) if g.pid) == n, 120,
                     "every worker to start")
            if what == "start":
                last = max(g.started_at or 0.0 for g in rows(stack, job, 1))
                figures["start_s"] = last - stack.job(job).submitted_at
                stack.tpuq("cancel", str(job))
                stack.wait_state(job, "cancelled", timeout=120)
            elif what == "failure":
                t0 = time.time()
                os.killpg(rows(stack, job, 1)[1].pid or 0, signal.SIGKILL)
                stack.wait_state(job, "failed", timeout=120)
                figures["failure_stop_s"] = max(g.ended_at or 0.0
                                                for g in rows(stack, job, 1)) - t0
            else:
                t0 = time.time()
                md.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
                stack.wait_state(job, "queued", timeout=120)
                figures["notice_requeue_s"] = stack.job(job).updated_at - t0
                stack.tpuq("cancel", str(job))
        return figures
    finally:
        stack.cleanup()
        md.__exit__(None, None, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, choices=sorted(TYPES), default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as d:
            results.append(one_round(Path(d), args.workers))
    medians = {k: statistics.median(r[k] for r in results) for k in results[0]}
    if args.json:
        print(json.dumps({"workers": args.workers, "rounds": results, "median": medians}))
        return
    print(f"slice of {args.workers} workers, median of {args.rounds} rounds (embedded)")
    print(f"  submit -> every worker started   {medians['start_s'] * 1000:8.0f} ms")
    print(f"  worker killed -> every worker ended {medians['failure_stop_s'] * 1000:5.0f} ms")
    print(f"  notice -> gang requeued          {medians['notice_requeue_s'] * 1000:8.0f} ms")


if __name__ == "__main__":
    main()
