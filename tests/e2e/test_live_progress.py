"""A running job's reported progress shows while it runs, in `show` and `status`."""

from __future__ import annotations

import json

from tests.harness import fixture_cmd, wait_for


def test_status_and_show_see_the_step_of_a_running_job(stack, host, tmp_path):
    stack.start_agent(host)
    gate = tmp_path / "gate"
    job = stack.submit(*fixture_cmd("progress_job.py", gate))
    stack.wait_log(job, "reported")

    def step_shown() -> bool:
        shown = json.loads(stack.tpuq("show", str(job), "--json").stdout)
        return shown["attempt_list"][-1]["checkpoint_step"] == 5

    wait_for(step_shown, 15, "the step in show while the job runs")
    assert stack.job(job).state == "running"
    row = next(r for r in stack.tpuq("status", COLUMNS="200").stdout.splitlines()
               if r.split()[:1] == [str(job)])
    assert "step 5" in row
    gate.touch()
    stack.wait_state(job, "succeeded")
