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


def test_the_agent_log_says_what_show_records_for_a_preempted_job_that_exits_0(
        stack, host, tmp_path):
    """A job that saves and exits 0 on its stop signal was preempted, not finished: the
    agent's line says what `show` records."""
    from tests.harness import fixture_cmd

    agent = stack.start_agent(host)
    job = stack.submit(*fixture_cmd("trap_term.py", tmp_path / "saved"))
    stack.wait_log(job, "ready")
    stack.tpuq("preempt", str(job))
    wait_for(lambda: len(stack.attempts(job)) > 1 or stack.attempts(job)[0].outcome, 30,
             "the first attempt to end")
    first = stack.attempts(job)[0]
    assert (first.outcome, first.exit_code) == ("preempted", 0)
    line = f"job {job} attempt 1: preempted (exit 0): preempted ("
    wait_for(lambda: line in agent.log_since_start(), 10, "the preempted attempt's line",
             on_timeout=agent.log_since_start)
    assert f"job {job} attempt 1: succeeded" not in agent.log_since_start()
    assert "preempted" in stack.tpuq("show", str(job)).stdout
    stack.tpuq("cancel", str(job))
    stack.wait_state(job, "cancelled")


def test_an_agent_stopped_as_soon_as_it_started_logs_no_traceback(team_stack, host):
    """A clean stop is clean even while the Celery worker is still starting up (its
    start, cut short by the stop, used to log an "Unrecoverable error" and a traceback)."""
    agent = team_stack.start_agent(host)
    for _ in range(3):
        assert agent.stop() == 0
        agent.start()
    assert agent.stop() == 0
    log = agent.log_path.read_text()
    assert "Traceback" not in log and "CRITICAL" not in log, log[-3000:]
