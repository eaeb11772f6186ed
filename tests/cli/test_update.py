"""`tpuq update`: a job that has not started yet changes; one that has is refused."""

from __future__ import annotations


def test_update_changes_a_job_that_has_not_started(stack):
    job = stack.submit("--hold", "--", "/bin/true")
    r = stack.tpuq("update", str(job), "--priority", "5", "--time", "6h")
    assert f"job {job}: updated: priority 5, time_limit 6h" in r.stdout
    row = stack.job(job)
    assert (row.priority, row.time_limit_s) == (5, 21600.0)
    queued = stack.submit("--", "/bin/true")
    r = stack.tpuq("update", str(queued), "--hold")
    assert stack.job(queued).state == "held"
    stack.tpuq("cancel", str(job))
    r = stack.tpuq("update", str(job), "--priority", "1", check=False)
    assert r.returncode == 5 and "only a queued or held job changes" in r.stderr
    r = stack.tpuq("update", str(queued), "--priority", "10000000", check=False)
    assert r.returncode == 2 and "--priority" in r.stderr
    r = stack.tpuq("update", str(queued), check=False)
    assert r.returncode == 2 and "nothing to change" in r.stderr
