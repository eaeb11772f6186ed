"""`tpuq logs`: --tail, headers on the text's stream, and what the output cannot say
(why an attempt wrote nothing, why a job never started)."""

from __future__ import annotations


def test_tail_and_attempt_headers(stack, host):
    stack.start_agent(host)
    job = stack.submit("--", "sh", "-c", "for i in 1 2 3 4 5; do echo line $i; done")
    stack.wait_state(job, "succeeded")
    r = stack.tpuq("logs", str(job), "--tail", "2")
    assert r.stdout == "line 4\nline 5\n"
    twice = stack.submit("--", "sh", "-c",
                         'echo run $TPUQ_ATTEMPT; [ "$TPUQ_ATTEMPT" = 1 ] && exit 75; exit 0')
    stack.wait_state(twice, "succeeded")
    r = stack.tpuq("logs", str(twice))
    assert r.stdout.startswith("==> attempt 1"), "headers go with the text"
    assert "run 1\n==> attempt 2" in r.stdout and r.stdout.endswith("run 2\n")
    r = stack.tpuq("logs", str(job), "--attempt", "9", check=False)
    assert r.returncode == 3 and f"job {job} has no attempt 9" in r.stderr


def test_a_job_that_never_ran_or_wrote_nothing_says_why(stack, host, tmp_path):
    stack.start_agent(host)
    held = stack.submit("--hold", "--", "/bin/true")
    stack.tpuq("cancel", str(held))
    r = stack.tpuq("logs", str(held), check=False)
    assert r.returncode == 11
    assert f"tpuq: job {held} never started: cancelled (cancelled by " in r.stderr
    script = tmp_path / "gone.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    job = stack.submit("--hold", "--", str(script))
    script.unlink()  # the command cannot start on the host
    stack.tpuq("release", str(job))
    stack.wait_state(job, "failed", timeout=60)
    r = stack.tpuq("logs", str(job), check=False)
    assert "tpuq: attempt 1 wrote nothing: failed: " in r.stderr, r.stderr
