"""Where the agent's time goes during job turnover: py-spy attached to the agent.

    .venv/bin/pip install py-spy        # or: pip install --target /tmp/pyspy py-spy
    .venv/bin/python bench/profile_turnover.py [--team] [--jobs 200] [--py-spy PATH] [--top 25] [--gil]

Runs one turnover round (see bench/turnover.py) with py-spy sampling the agent's
threads, then prints the functions with the largest share of samples, by self time
and by inclusive time. py-spy is started and stopped by its own pid.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench import turnover
from bench.embedded import BIN, BenchError, EmbeddedStack


def find_py_spy(given: str | None) -> str:
    for candidate in (given, str(BIN / "py-spy"), shutil.which("py-spy"), "/tmp/pyspy/bin/py-spy"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise BenchError("py-spy not found: pip install py-spy (or pass --py-spy PATH)")


@contextlib.contextmanager
def sampling(cmd: list[str]) -> Iterator[None]:
    """py-spy runs while the block runs; stopped by its pid with SIGINT (it then writes)."""
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(0.5)  # let it attach
        if spy.poll() is not None:
            _, err = spy.communicate()
            raise BenchError(f"py-spy exited: {err.decode(errors='replace')}")
        yield
    finally:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)
        try:
            spy.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.communicate()


def _frame(raw: str) -> str:
    """'run_pass (tpuq/scheduler/passes.py:63)' -> 'tpuq/scheduler/passes.py:run_pass'."""
    name, _, where = raw.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("/site-packages/", "/work/main/", "/lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "/lib/python3.":
                path = "stdlib/" + path.split("/", 1)[-1]
            break
    return f"{path}:{name}"


# leaf frames that mean "waiting, not working" (py-spy's idle detection misses some)
WAITS = ("threading.py:Condition.wait", "socket.py:socket.accept",
         "selectors.py:EpollSelector.select", "threading.py:Event.wait",
         "threading.py:Thread.join", "time:sleep", "concurrent/futures/thread.py:_worker",
         "tpuq/agent/main.py:StopSignals.wait", "kombu/utils/eventio.py:_epoll.poll",
         "threading.py:Thread._wait_for_tstate_lock")


def _thread_group(raw: str) -> str:
    """'thread (123): job-4.1' -> 'job-*' (one group per kind of thread)."""
    name = raw.split("): ", 1)[-1]
    return "job-* (supervisors)" if name.startswith("job-") else name


def aggregate(raw_path: str) -> tuple[int, dict[str, collections.Counter[str]]]:
    """(busy samples, {"self"|"inclusive"|"thread": counts}) from py-spy raw output."""
    total = 0
    counts: dict[str, collections.Counter[str]] = {
        k: collections.Counter() for k in ("self", "inclusive", "thread")}
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            raw_frames = stack.split(";")
            group = "?"
            if raw_frames[0].startswith("thread ("):
                group = _thread_group(raw_frames.pop(0))
            frames = [_frame(fr) for fr in raw_frames if not fr.startswith("process ")]
            if not frames or frames[-1] in WAITS:
                continue
            total += n
            counts["self"][frames[-1]] += n
            counts["thread"][group] += n
            for fr in set(frames):
                counts["inclusive"][fr] += n
    return total, counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--py-spy", dest="py_spy")
    p.add_argument("--rate", type=int, default=500, help="samples per second")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--team", action="store_true",
                   help="profile the team deployment's agent (PostgreSQL + Redis) instead")
    p.add_argument("--idle", action="store_true", help="also sample idle (waiting) threads")
    p.add_argument("--gil", action="store_true",
                   help="only the thread holding the GIL: where the Python CPU goes (a wait "
                        "in C, psycopg's for a reply say, is never counted)")
    args = p.parse_args()
    py_spy = find_py_spy(args.py_spy)
    out_dir = tempfile.mkdtemp(prefix="tpuq-prof-")
    raw = os.path.join(out_dir, "agent.txt")
    stack_class = EmbeddedStack
    if args.team:
        from bench.team import TeamStack
        stack_class = TeamStack
    with stack_class() as stack:
        assert stack.agent is not None
        cmd = [py_spy, "record", "--pid", str(stack.agent.pid), "--format", "raw",
               "--rate", str(args.rate), "--output", raw, "--threads"]
        if args.idle:
            cmd.append("--idle")
        if args.gil:
            cmd.append("--gil")
        figures = turnover.turnover(stack, args.jobs, lambda: sampling(cmd))
    if not os.path.exists(raw):
        raise BenchError("py-spy wrote nothing")
    total, counts = aggregate(raw)
    print(f"turnover: {figures['turnover_ms_per_job']:.1f} ms/job, agent CPU "
          f"{figures['turnover_agent_cpu_ms_per_job']:.1f} ms/job (slowed by sampling); "
          f"{total} busy samples from the release of the blocker to the last job's end; "
          f"raw stacks: {raw}")
    counts["inclusive, tpuq code only"] = collections.Counter(
        {k: v for k, v in counts["inclusive"].items() if k.startswith("tpuq/")})
    for title, counter in counts.items():
        print(f"\ntop {args.top} by {title} (share of busy samples)")
        for name, n in counter.most_common(args.top):
            print(f"  {100.0 * n / total:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
