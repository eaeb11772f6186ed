"""A running job's reported progress shows while it runs, in `show` and `status`."""

from __future__ import annotations

import json
from typing import Any

from tests.harness import Stack, fixture_cmd, wait_for
from tpuq.jobjson import epoch


def running(stack: Stack, fixture: str, gate: Any, step: int) -> tuple[int, dict[str, Any]]:
    """A job of `fixture` (it reports, then waits for `gate`), once `show` has `step`:
    its id and its latest attempt as `show --json` gives it."""
    job = stack.submit(*fixture_cmd(fixture, gate))
    stack.wait_log(job, "reported")

    def latest() -> dict[str, Any]:
        return json.loads(stack.tpuq("show", str(job), "--json").stdout)["attempt_list"][-1]

    wait_for(lambda: latest()["checkpoint_step"] == step, 15, f"step {step} in show")
    assert stack.job(job).state == "running"
    return job, latest()


def status_row(stack: Stack, job: int) -> str:
    return next(r for r in stack.tpuq("status", COLUMNS="200").stdout.splitlines()
                if r.split()[:1] == [str(job)])


def test_status_and_show_see_the_step_of_a_running_job(stack, host, tmp_path):
    stack.start_agent(host)
    gate = tmp_path / "gate"
    job, _ = running(stack, "progress_job.py", gate, 5)
    assert "step 5" in status_row(stack, job)
    gate.touch()
    stack.wait_state(job, "succeeded")


def test_a_job_that_reports_its_total_gets_an_eta(stack, host, tmp_path):
    stack.start_agent(host)
    gate = tmp_path / "gate"
    job, att = running(stack, "eta_job.py", gate, 20)
    assert att["checkpoint_total"] == 100
    # 10 steps in about 0.2 s: 80 more take about 1.6 s after the last report
    assert 0.8 < epoch(att["eta_at"]) - epoch(att["checkpoint_at"]) < 30
    assert "step 20/100, ETA " in status_row(stack, job)
    assert "last checkpoint step 20/100 at " in stack.tpuq("show", str(job)).stdout
    gate.touch()
    stack.wait_state(job, "succeeded")
