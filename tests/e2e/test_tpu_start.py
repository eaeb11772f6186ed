"""A TPU that does not start never makes a silent loop: only a holder found on the chips
makes it "busy"; anything else is requeued a few times, then the job fails with the
runtime's own words and a hint."""

from __future__ import annotations

import sys

from tests.harness import fixture_cmd, wait_for


def test_a_tpu_that_never_starts_fails_the_job_after_a_few_host_retries(stack, host):
    stack.start_agent(host, TPUQ_HOST_ERROR_RETRIES="2")
    job_id = stack.submit(*fixture_cmd("tpu_wont_start.py"))
    job = stack.wait_state(job_id, "failed", timeout=30)
    tries = stack.attempts(job_id)
    assert [a.outcome for a in tries] == ["host_error"] * 3
    assert job.failures == 1 and "3 host problems in a row" in job.reason
    shown = stack.tpuq("show", str(job_id)).stdout
    assert "Unexpected PJRT_Api size: expected 120, got 112" in shown, "the runtime's words"
    assert "pip install -U 'jax[tpu]'" in shown, "and what to do about it"
    assert stack.host("tpu-a").busy_reason is None, "no holder: the host is not busy"


def test_a_busy_message_with_a_holder_on_the_chips_marks_the_host_busy(stack, host, tmp_path):
    stack.start_agent(host)
    release = tmp_path / "release"
    job_id = stack.submit(*fixture_cmd("busy_by_stranger.py", host.dev / "accel0",
                                       tmp_path / "m", release))
    busy = wait_for(lambda: stack.host("tpu-a").busy_reason, 20, "the host marked busy")
    holder = (tmp_path / "m.holder").read_text()
    assert f"pid {holder}" in busy
    first = wait_for(lambda: (stack.attempts(job_id) or [None])[0].outcome and
                     stack.attempts(job_id)[0], 20, "the first attempt recorded")
    assert first.outcome == "host_error" and first.reason.startswith("TPU busy:")
    assert f"pid {holder}" in first.reason
    release.touch()  # the stranger lets go: the host takes work again and the job runs
    job = stack.wait_state(job_id, "succeeded", timeout=30)
    assert job.failures == 0 and stack.host("tpu-a").busy_reason is None


def test_a_job_on_a_multislice_node_sees_one_slice_and_drops_the_shells_tpu_variables(
        stack, host, metadata, tmp_path):
    """tpu-env of a multislice queued resource names MEGASCALE_* peers in other slices:
    JAX would compute them for a single-host job, which then hangs."""
    import json

    from tests.harness import FIXTURES

    metadata.set("instance/attributes/accelerator-type", "v5litepod-8")
    metadata.set("instance/attributes/tpu-env", "NODE_ID: 'ms-0'\nMEGASCALE_NUM_SLICES: '2'\n"
                 "MEGASCALE_SLICE_ID: '1'\nMEGASCALE_COORDINATOR_ADDRESS: '10.9.9.9:8080'\n")
    metadata.set("instance/attributes/worker-network-endpoints", "t1v-n-ms-w-0")
    stack.start_agent(host, TPUQ_METADATA_URL=metadata.url)
    job_id = stack.submit("--", sys.executable, str(FIXTURES / "show_env.py"),
                          TPU_LOAD_LIBRARY="0", MEGASCALE_NUM_SLICES="2")
    stack.wait_state(job_id, "succeeded")
    seen = json.loads(stack.log_text(job_id).strip().splitlines()[-1])["env"]
    assert (seen["MEGASCALE_NUM_SLICES"], seen["MEGASCALE_SLICE_ID"],
            seen["MEGASCALE_COORDINATOR_ADDRESS"]) == ("1", "0", "t1v-n-ms-w-0")
    assert "TPU_LOAD_LIBRARY" not in seen
    shown = stack.tpuq("show", str(job_id)).stdout
    assert "dropped   MEGASCALE_NUM_SLICES, TPU_LOAD_LIBRARY" in shown
