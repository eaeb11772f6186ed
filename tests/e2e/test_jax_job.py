"""A real JAX program submitted through tpuq: proves the spawn path and the environment."""

from __future__ import annotations

import pytest

from tests.harness import ROOT

pytestmark = pytest.mark.jax


def test_jax_training_on_cpu_runs_through_tpuq(stack, host, tmp_path):
    stack.start_agent(host)
    out = tmp_path / "params.sha256"
    job_id = stack.submit(str(ROOT / "examples" / "train.py"), "--steps", "20",
                          "--out", str(out), cwd=tmp_path)
    job = stack.wait_state(job_id, "succeeded", "failed", timeout=120)
    assert job.state == "succeeded", stack.log_text(job_id)
    assert len(out.read_text().strip()) == 64
    [attempt] = stack.attempts(job_id)
    assert attempt.checkpoint_step == 20, "checkpoints reported through tpuq.job reach tpuq"
