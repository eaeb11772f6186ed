"""Team limits with real agents: a team over its quota waits, with the reason in
`tpuq status`, while another team runs; time limits end a job as `timeout`."""

from __future__ import annotations

import json

from tests.harness import fixture_cmd, wait_for


def waiting_for(stack, job_id: int) -> str | None:  # type: ignore[no-untyped-def]
    jobs = json.loads(stack.tpuq("status", "--json").stdout)
    return next(j["waiting_for"] for j in jobs if j["id"] == job_id)


def test_team_over_its_quota_waits_with_the_reason_while_another_team_runs(stack, host,
                                                                           tmp_path):
    gate = tmp_path / "gate"
    stack.tpuq("quota", "set", "vision", "--max-chips", "2")
    stack.tpuq("quota", "set", "audio", "--budget", "0")
    stack.tpuq("quota", "set", "nlp", "--share", "1")  # teams are made by admins
    stack.start_agent(host)
    first = stack.submit("--chips", "2", *fixture_cmd("wait_file.py", gate), TPUQ_TEAM="vision")
    stack.wait_state(first, "running")
    over = stack.submit("--team", "vision", "--chips", "2", *fixture_cmd("wait_file.py", gate))
    broke = stack.submit("--team", "audio", "--chips", "1", "--", "/bin/true")
    other = stack.submit("--chips", "2", *fixture_cmd("wait_file.py", gate), TPUQ_TEAM="nlp")
    stack.wait_state(other, "running")
    wait_for(lambda: waiting_for(stack, over) == "team vision at 2/2 chips, job needs 2"
             or waiting_for(stack, over) == "team vision at 2/2 chips", 30,
             "the quota reason for the waiting vision job")
    assert waiting_for(stack, broke).startswith("weekly budget spent, resets Mon 00:00")
    status = stack.tpuq("status").stdout
    assert "team vision at 2/2 chips" in status and "weekly budget spent" in status
    assert stack.job(over).state == "queued" and stack.job(broke).state == "queued"
    shown = {t["team"]: t for t in json.loads(stack.tpuq("quota", "--json").stdout)}
    assert (shown["vision"]["chips"], shown["vision"]["max_chips"]) == (2, 2)
    assert shown["nlp"]["chips"] == 2
    gate.touch()
    stack.wait_all([first, other, over], "succeeded", timeout=60)
    stack.tpuq("quota", "set", "audio", "--budget", "none")
    stack.wait_state(broke, "succeeded")


def test_time_limit_ends_the_job_as_timeout(stack, host, tmp_path):
    stack.start_agent(host)
    job_id = stack.submit("--time", "1s", "--grace", "5s",
                          *fixture_cmd("wait_file.py", tmp_path / "never"))
    job = stack.wait_state(job_id, "timeout", "failed", "succeeded", timeout=60)
    assert job.state == "timeout", job.reason
    (attempt,) = stack.attempts(job_id)
    assert attempt.outcome == "timeout"
    assert attempt.ended_at - attempt.started_at < 30, "stopped at the limit, not later"
