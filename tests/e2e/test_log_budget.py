"""Job logs have a budget: each user's logs on a host are kept within
TPUQ_LOG_BUDGET_BYTES, the oldest ended attempts' going first (files and Redis
streams), never a running job's; an owner over budget is told at submit and shown in
`status` and `show`; ended attempts' logs go after TPUQ_LOG_KEEP_DAYS; a host low on
disk takes no work and says why."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import wait_for

BUDGET = 2_000_000
# and in Redis (team), the ended attempts' streams of a host: one of them
KEEPER = {"TPUQ_LOG_CHECK_S": "0.3", "TPUQ_LOG_BUDGET_BYTES": str(BUDGET),
          "TPUQ_LOG_STREAM_BUDGET_BYTES": "1000000"}
WRITE = "head -c 800000 /dev/zero | tr '\\0' x"  # 800 kB of output


def streams(stack, job_id: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    """The Redis streams of a job's attempts (team deployment)."""
    import redis

    return list(redis.Redis.from_url(stack.redis.url).scan_iter(f"tpuq:logs:*:{job_id}:*"))


def test_a_users_logs_stay_within_the_budget_and_a_running_jobs_are_kept(stack, host, tmp_path):
    stack.start_agent(host, TPUQ_RETRY_BACKOFF_S="0", **KEEPER)
    # a job that fails and is retried writes a log per attempt: 4 x 800 kB
    looping = stack.submit("--max-retries", "3", "--", "sh", "-c", f"{WRITE}; exit 1")
    stack.wait_state(looping, "failed")
    logs = [Path(a.log_path) for a in stack.attempts(looping)]
    wait_for(lambda: [p.exists() for p in logs] == [False, False, True, True], 30,
             "the two oldest attempts' logs removed, the newest two kept (1.6 MB of 2 MB)")
    r = stack.tpuq("logs", str(looping), "--attempt", "1")
    assert r.stdout == "" and f"attempt 1's log is no longer kept ({host.name}:{logs[0]})" \
        in r.stderr, r.stderr
    if stack.deployment == "team":
        wait_for(lambda: streams(stack, looping) == [f"tpuq:logs:tester:{looping}:4".encode()],
                 30, "the removed attempts' streams gone from Redis, and attempt 3's: over "
                 "the host's stream budget (its file stays)")
        assert logs[2].exists()

    gate = tmp_path / "gate"
    big = stack.submit("--", "sh", "-c", f"{WRITE}; {WRITE}; {WRITE}; "
                       f'until [ -e "{gate}" ]; do sleep 0.05; done')
    stack.wait_process(big)
    running = Path(stack.attempts(big)[0].log_path)
    wait_for(lambda: running.exists() and running.stat().st_size == 2_400_000, 30,
             "the running job's 2.4 MB written")
    wait_for(lambda: not any(p.exists() for p in logs), 30,
             "every ended attempt's log removed: the running job alone is over budget")
    says = (f"tester's job logs take 2.3 MiB on {host.name}, over the 1.9 MiB each user "
            "may keep on a host (TPUQ_LOG_BUDGET_BYTES)")
    r = wait_for(lambda: (r := stack.tpuq("submit", "--hold", "--", "/bin/true")).stderr
                 and r, 30, "the warning at submit")
    assert f"warning: {says}" in r.stderr
    assert f"logs over budget: {says}" in stack.tpuq("status").stdout
    assert f"logs over budget: {says}" in stack.tpuq("show", str(big)).stdout
    shown = json.loads(stack.tpuq("show", "--json", str(big)).stdout)["logs_over_budget"]
    assert [(o["owner"], o["host"], o["budget"]) for o in shown] == \
        [("tester", host.name, BUDGET)]
    assert running.stat().st_size == 2_400_000, "nothing of a running job is lost"
    assert len(stack.tpuq("logs", str(big)).stdout) == 2_400_000
    gate.touch()
    stack.wait_state(big, "succeeded")


def test_ended_attempts_logs_go_after_the_retention_a_running_ones_stay(stack, host, tmp_path):
    stack.start_agent(host, TPUQ_LOG_CHECK_S="0.3", TPUQ_LOG_KEEP_DAYS="0.00002")  # 1.7 s
    gate = tmp_path / "gate"
    long = stack.submit("--chips", "1", "--", "sh", "-c",
                        f'echo long; until [ -e "{gate}" ]; do sleep 0.05; done')
    stack.wait_log(long, "long")
    short = stack.submit("--chips", "1", "--", "sh", "-c", "echo short")
    stack.wait_state(short, "succeeded")
    ended = Path(stack.attempts(short)[0].log_path)
    wait_for(lambda: not ended.exists(), 30, "the ended attempt's log removed")
    if stack.deployment == "team":
        wait_for(lambda: streams(stack, short) == [], 30, "its stream gone from Redis")
    assert Path(stack.attempts(long)[0].log_path).read_text() == "long\n", \
        "a running job's log is kept, however old"
    gate.touch()
    stack.wait_state(long, "succeeded")


def test_a_host_low_on_disk_takes_no_work_and_says_why(stack, host):
    stack.start_agent(host, TPUQ_DISK_MIN_FREE_BYTES=str(2**60))
    job = stack.submit("--", "/bin/true")
    line = wait_for(lambda: [ln for ln in stack.tpuq("status").stdout.splitlines()
                             if ln.startswith(host.name) and "low on disk" in ln], 30,
                    "the host shown out of service")[0]
    assert "free under" in line and "TPUQ_DISK_MIN_FREE_BYTES" in line
    assert stack.job(job).state == "queued"
    shown = stack.tpuq("show", str(job)).stdout
    assert "low on disk" in shown, shown
