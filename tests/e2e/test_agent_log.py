"""The agent's log says what happened to jobs, one line each, and not Celery's per-task
chatter."""

from __future__ import annotations

from tests.harness import wait_for


def test_the_agent_log_tells_each_jobs_start_and_end(stack, host):
    agent = stack.start_agent(host)
    ok = stack.submit("--", "/bin/true")
    bad = stack.submit("--", "sh", "-c", "exit 3")
    stack.wait_state(ok, "succeeded")
    stack.wait_state(bad, "failed")
    wait_for(lambda: f"job {bad} attempt 1: failed" in agent.log_since_start(), 10,
             "the failed job's line")
    log = agent.log_since_start()
    assert f"job {ok} attempt 1: started, pid " in log
    assert f"job {ok} attempt 1: succeeded (exit 0)" in log
    assert f"job {bad} attempt 1: failed (exit 3)" in log
    chatter = [line for line in log.splitlines() if "Task tpuq." in line]
    assert not chatter, f"Celery's task lines are off: {chatter[:3]}"
