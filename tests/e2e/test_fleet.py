"""The fleet end to end: `tpuq fleet controller` (a real process) keeps a slot alive
through the real google-cloud-tpu client against the fake Cloud TPU API over HTTP; the
fake's "VM" is a real `tpuq agent` on fake devices, joined to the team deployment with
what the controller put in the VM's metadata.

What differs from a TPU VM: workers/startup-script.sh itself does not run (it needs root,
systemd and pip); the test does what its last step does, starting `tpuq agent` with the
database, broker and host name (`tpuq-host-prefix` + `-w0`) it would write to
/etc/tpuq/agent.env from that metadata. Each VM of the slot gets a new boot id and
machine id, and the same TPUQ_HOME: a disk the slot's VMs share, so the replacement finds
the job's checkpoint where the first VM wrote it (a deployment-wide checkpoint root
would do the same).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import TRAIN_ARGS
from tests.fakes.tpu_api import FakeCloud
from tests.fakes.tpu_http import FakeTpuServer
from tests.fleet.vms import Vms
from tests.harness import ROOT, TPUQ, step_delay, wait_for

FLEET = """
[[slot]]
name = "v4"
accelerator_type = "v4-8"
runtime_version = "tpu-ubuntu2204-base"
project = "proj"
zone = "us-central2-b"
capacity = "spot"
count = 1
"""


@pytest.mark.team
@pytest.mark.jax
def test_a_preempted_vm_is_replaced_and_its_job_resumes_there_bit_identical(
        team_stack, tmp_path, reference_hash):
    expected = reference_hash("train.py")
    cloud = FakeCloud(clock=time.time)
    cloud.faults.create_s, cloud.faults.delete_s = 1.0, 0.5
    vms = Vms(team_stack, tmp_path / "vm")
    cloud.on_ready, cloud.on_gone = vms.boot, vms.power_off
    server = FakeTpuServer(cloud).start()
    (tmp_path / "fleet.toml").write_text(FLEET)
    team_stack.tpuq("fleet", "apply", str(tmp_path / "fleet.toml"))
    log = open(tmp_path / "controller.log", "wb")
    controller = subprocess.Popen(
        [*TPUQ, "fleet", "controller"], stdout=log, stderr=subprocess.STDOUT,
        env=team_stack.env(TPUQ_TPU_API_ENDPOINT=server.endpoint, TPUQ_FLEET_POLL_S="0.3"))
    try:
        def said() -> str:
            return (tmp_path / "controller.log").read_text()

        host = wait_for(lambda: team_stack.host("v4-0-w0"), 60, "the first VM's agent to join",
                        on_timeout=said)
        assert host.lost_reason is None
        out = tmp_path / "hash.txt"
        job = team_stack.submit(str(ROOT / "examples" / "train.py"), *TRAIN_ARGS,
                                "--step-delay", step_delay("train.py"), "--out", str(out),
                                cwd=tmp_path)
        team_stack.wait_log(job, "checkpoint at step 10", timeout=60)

        assert cloud.preempt("tpuq-v4-0-g1")  # spot: Google deletes the VM
        first = wait_for(lambda: (a := team_stack.attempts(job)[0]).ended_at and a, 20,
                         "the lost VM's job to be requeued", on_timeout=said)
        assert first.outcome == "preempted", first.reason
        assert "its TPU VM is lost" in (first.reason or "")
        assert team_stack.host("v4-0-w0").lost_reason is not None

        wait_for(lambda: "tpuq-v4-0-g2" in cloud.count.creates, 30, "a replacement VM",
                 on_timeout=said)
        done = team_stack.wait_state(job, "succeeded", "failed", timeout=120)
        assert done.state == "succeeded", team_stack.log_text(job)
        assert re.search(r"resumed from step [1-9]\d*", team_stack.log_text(job))
        assert out.read_text().strip() == expected, "resumed run differs from an uninterrupted one"
        assert done.failures == 0 and done.preemptions == 1
        assert cloud.count.creates == {"tpuq-v4-0-g1": 1, "tpuq-v4-0-g2": 1}
        status = team_stack.tpuq("fleet", "status").stdout
        assert "v4-8 spot, slot 0: ready since" in status, status
    finally:
        controller.send_signal(signal.SIGTERM)
        try:
            controller.wait(20)
        except subprocess.TimeoutExpired:
            controller.kill()
        log.close()
        server.stop()
