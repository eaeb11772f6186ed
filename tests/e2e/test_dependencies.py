"""Chains: `--after` starts a job once its dependencies succeeded (and cancels it, with the
reason, when one did not), `--after-any` once they ended at all."""

from __future__ import annotations

import json

from tests.harness import fixture_cmd, wait_for


def reason(stack, job_id: int) -> str | None:  # type: ignore[no-untyped-def]
    jobs = json.loads(stack.tpuq("status", "--json").stdout)
    return next(j["waiting_for"] for j in jobs if j["id"] == job_id)


def test_a_chain_runs_in_order_and_a_failed_link_cancels_the_rest(stack, host, tmp_path):
    stack.start_agent(host)
    gate = tmp_path / "gate"
    prep = stack.submit("--chips", "1", *fixture_cmd("wait_file.py", gate))
    train = stack.submit("--chips", "1", "--after", str(prep), "--", "/bin/true")
    evals = stack.submit("--chips", "1", "--after", str(train), "--", "/bin/true")
    stack.wait_process(prep)
    wait_for(lambda: reason(stack, train) == f"waiting for job {prep}", 30, "train's reason")
    assert stack.job(train).state == stack.job(evals).state == "queued", \
        "free chips, but the dependencies have not succeeded"
    gate.touch()
    stack.wait_all([prep, train, evals], "succeeded")
    ends = [stack.attempts(j)[-1] for j in (prep, train, evals)]
    assert ends[0].ended_at <= ends[1].started_at and ends[1].ended_at <= ends[2].started_at

    bad = stack.submit("--", "/bin/false")
    train2 = stack.submit("--after", str(bad), "--", "/bin/true")
    eval2 = stack.submit("--after", f"{train2},{prep}", "--", "/bin/true")
    cleanup = stack.submit("--after-any", str(bad), "--", "/bin/true")
    assert stack.wait_state(train2, "cancelled").reason == f"dependency job {bad} failed"
    assert stack.wait_state(eval2, "cancelled").reason == f"dependency job {train2} cancelled"
    assert stack.wait_state(cleanup, "succeeded"), "--after-any runs whatever the outcome"
    assert not stack.attempts(train2) and not stack.attempts(eval2)


def test_a_dependency_on_a_job_that_does_not_exist_is_refused(stack):
    r = stack.tpuq("submit", "--after", "41", "--", "/bin/true", check=False)
    assert (r.returncode, r.stderr) == (2, "tpuq: error: --after: no job 41\n")
    r = stack.tpuq("submit", "--after", "x", "--", "/bin/true", check=False)
    assert r.returncode == 2 and "--after: 'x' is not a job id" in r.stderr
    assert stack.job_count() == 0
