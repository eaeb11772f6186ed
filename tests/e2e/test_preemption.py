"""Preemption and recovery end to end: a notice reaches the job, it checkpoints, is
requeued and resumes, and nothing is lost or counted as a failure (issue 4)."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import TRAIN_ARGS, free_port
from tests.harness import ROOT, fixture_cmd, step_delay, wait_for
from tpuq.jobjson import epoch

EXAMPLES = ROOT / "examples"
TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


def submit_training(stack, script: str, tmp_path: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / f"{script}.sha256"
    port = ("--coord-port", str(free_port())) if "orbax" in script else ()
    job_id = stack.submit(*extra, str(EXAMPLES / script), *TRAIN_ARGS,
                          "--step-delay", step_delay(script),
                          *port, "--out", str(out), cwd=tmp_path)
    return job_id, out


def kill_job_group(stack, job_id: int) -> None:
    """What a reboot does to the job: its whole process group dies at once."""
    pid = stack.attempts(job_id)[-1].pid
    assert pid, "the attempt has a process"
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass



def show_json(stack, job_id: int) -> dict:
    return json.loads(stack.tpuq("show", str(job_id), "--json").stdout)


# ---- maintenance notice from the metadata server ---------------------------------------------

@pytest.mark.jax
@pytest.mark.parametrize("script", ["train.py", "train_orbax.py"])
def test_maintenance_notice_checkpoints_requeues_and_resumes_bit_identical(
        stack, host, tmp_path, metadata, reference_hash, script):
    expected = reference_hash(script)
    agent = stack.start_agent(host, TPUQ_METADATA_URL=metadata.url)
    job_id, out = submit_training(stack, script, tmp_path)
    stack.wait_log(job_id, "checkpoint at step", timeout=60)

    metadata.set("instance/maintenance-event", TERMINATE)
    job = stack.wait_state(job_id, "queued", timeout=30)
    [first] = stack.attempts(job_id)
    assert first.outcome == "preempted", first.reason
    assert job.failures == 0 and job.preemptions == 1
    saved = re.search(r"preempted at step (\d+), checkpoint saved", stack.log_text(job_id))
    assert saved, "the job saved a checkpoint on the notice"
    if script == "train.py":  # reports its checkpoints through tpuq.job
        assert first.checkpoint_step == int(saved.group(1))
    busy = stack.host(host.name).busy_reason or ""
    assert f"notice: maintenance-event {TERMINATE}" in busy, "the host takes no work"
    assert stack.job(job_id).state == "queued" and len(stack.attempts(job_id)) == 1

    # the maintenance reboots the host; the agent comes back with it
    agent.kill()
    stack.kill_keepers()
    host.reboot()
    metadata.set("instance/maintenance-event", "NONE")
    stack.start_agent(host, TPUQ_METADATA_URL=metadata.url)
    job = stack.wait_state(job_id, "succeeded", "failed", timeout=90)
    assert job.state == "succeeded", stack.log_text(job_id)
    assert f"resumed from step {saved.group(1)}" in stack.log_text(job_id)
    assert out.read_text().strip() == expected, "resumed run differs from an uninterrupted one"
    assert job.failures == 0 and job.preemptions == 1 and job.attempt == 2


@pytest.mark.jax
def test_host_takes_work_again_when_maintenance_passes_without_reboot(
        stack, host, tmp_path, metadata):
    stack.start_agent(host, TPUQ_METADATA_URL=metadata.url)
    gate = tmp_path / "gate"
    job_id = stack.submit(*fixture_cmd("until_gate.py", gate))
    stack.wait_log(job_id, "ready")
    metadata.set("instance/maintenance-event", TERMINATE)
    stack.wait_state(job_id, "queued", timeout=15)
    assert stack.attempts(job_id)[0].outcome == "preempted"
    # while the notice stands, nothing starts here, even after a few heartbeats
    beat = stack.host(host.name).heartbeat_at
    wait_for(lambda: stack.host(host.name).heartbeat_at > beat + 1.5, 10, "heartbeats")
    assert stack.job(job_id).state == "queued" and len(stack.attempts(job_id)) == 1
    assert "notice" in (stack.host(host.name).busy_reason or "")
    # the event is over and the VM survived (e.g. it was live-migrated or cancelled)
    metadata.set("instance/maintenance-event", "NONE")
    stack.wait_state(job_id, "running", timeout=15)
    assert stack.host(host.name).busy_reason is None
    gate.touch()
    job = stack.wait_state(job_id, "succeeded")
    assert job.attempt == 2 and job.preemptions == 1 and job.failures == 0


def test_host_is_given_back_once_every_notice_source_says_the_maintenance_is_over(
        stack, host, tmp_path, metadata):
    """GCE announces one maintenance through the event and an upcoming window: the host
    stays out while either stands, and takes work again, without a reboot, once both are
    over (the event back to NONE, the window's key gone)."""
    import datetime as dt

    stack.start_agent(host, TPUQ_METADATA_URL=metadata.url)
    gate = tmp_path / "gate"
    job_id = stack.submit(*fixture_cmd("until_gate.py", gate))
    stack.wait_log(job_id, "ready")

    def busy() -> str:
        return stack.host(host.name).busy_reason or ""

    start = dt.datetime.now(dt.timezone.utc).isoformat()
    metadata.set("instance/maintenance-event", TERMINATE)
    metadata.set("instance/upcoming-maintenance", {  # snake_case, as GCE sends it
        "window_start_time": start, "type": "SCHEDULED", "maintenance_status": "PENDING"})
    stack.wait_state(job_id, "queued", timeout=15)
    assert stack.attempts(job_id)[0].outcome == "preempted"
    both = wait_for(lambda: "upcoming maintenance" in busy() and busy(), 20, "both notices")
    assert f"maintenance-event {TERMINATE}" in both and "\n" not in both, both

    metadata.set("instance/maintenance-event", "NONE")
    wait_for(lambda: TERMINATE not in busy(), 15, "the event's end")
    assert busy().startswith("notice: upcoming maintenance SCHEDULED"), \
        "the window still keeps the host out"
    assert stack.job(job_id).state == "queued" and len(stack.attempts(job_id)) == 1

    metadata.set("instance/upcoming-maintenance", None)  # nothing pending any more
    stack.wait_state(job_id, "running", timeout=20)
    assert stack.host(host.name).busy_reason is None
    gate.touch()
    job = stack.wait_state(job_id, "succeeded", "failed")
    assert job.state == "succeeded", stack.log_text(job_id)
    first, second = stack.attempts(job_id)
    assert second.host == host.name and second.outcome == "succeeded"
    assert job.preemptions == 1 and job.failures == 0


@pytest.mark.jax
def test_show_says_when_preempted_last_checkpoint_and_lost_time(stack, host, tmp_path):
    stack.start_agent(host)
    job_id, _ = submit_training(stack, "train.py", tmp_path)
    stack.wait_log(job_id, "checkpoint at step 10", timeout=60)
    stack.tpuq("preempt", str(job_id))
    stack.wait_state(job_id, "running", "queued", "succeeded", timeout=30)
    wait_for(lambda: stack.attempts(job_id)[0].outcome, 30, "attempt 1 ended")
    first = stack.attempts(job_id)[0]
    assert first.outcome == "preempted" and first.checkpoint_step is not None
    text = stack.tpuq("show", str(job_id)).stdout
    assert "preempted at" in text
    assert f"last checkpoint step {first.checkpoint_step}" in text
    assert re.search(r"lost \S+ of work", text), text
    obj = show_json(stack, job_id)["attempt_list"][0]
    assert obj["outcome"] == "preempted" and obj["checkpoint_step"] == first.checkpoint_step
    assert epoch(obj["ended_at"]) >= epoch(obj["checkpoint_at"])
    stack.wait_state(job_id, "succeeded", timeout=60)


# ---- reboot and agent stop ----------------------------------------------------------------------

@pytest.mark.jax
def test_reboot_requeues_at_once_and_resumes_from_checkpoint(stack, host, tmp_path,
                                                             reference_hash):
    expected = reference_hash("train.py")
    # a long lease: lease expiry must not be what brings the job back
    agent = stack.start_agent(host, TPUQ_LEASE_S="600")
    job_id, out = submit_training(stack, "train.py", tmp_path)
    stack.wait_log(job_id, "checkpoint at step 10", timeout=60)
    agent.kill()
    stack.kill_keepers()  # a reboot kills everything
    kill_job_group(stack, job_id)
    host.reboot()
    stack.start_agent(host, TPUQ_LEASE_S="600")
    stack.wait_state(job_id, "running", "succeeded", timeout=15)
    first = stack.attempts(job_id)[0]
    assert first.outcome == "preempted" and first.reason == "host rebooted"
    job = stack.wait_state(job_id, "succeeded", "failed", timeout=90)
    assert job.state == "succeeded", stack.log_text(job_id)
    assert re.search(r"resumed from step [1-9]\d*", stack.log_text(job_id))
    assert out.read_text().strip() == expected
    assert job.failures == 0 and job.preemptions == 1


@pytest.mark.jax
def test_sigterm_to_agent_preempts_requeues_and_job_resumes_after_restart(
        stack, host, tmp_path, reference_hash):
    expected = reference_hash("train.py")
    agent = stack.start_agent(host)
    job_id, out = submit_training(stack, "train.py", tmp_path)
    stack.wait_log(job_id, "checkpoint at step", timeout=60)
    assert agent.stop(timeout=60) == 0, agent.log_tail()  # like `systemctl stop`
    job = stack.job(job_id)
    assert job.state == "queued", "the agent requeued its job before exiting"
    [first] = stack.attempts(job_id)
    assert first.outcome == "preempted" and first.exit_code == 75
    assert job.failures == 0 and job.preemptions == 1
    stack.start_agent(host)
    job = stack.wait_state(job_id, "succeeded", "failed", timeout=90)
    assert job.state == "succeeded", stack.log_text(job_id)
    assert "resumed from step" in stack.log_text(job_id)
    assert out.read_text().strip() == expected


# ---- signals, grace, exit codes, retries --------------------------------------------------------

def test_job_ignoring_sigterm_is_killed_after_grace_requeued_and_runs_from_scratch(
        stack, host, tmp_path):
    stack.start_agent(host)
    counter = tmp_path / "runs.txt"
    job_id = stack.submit("--grace", "1s", *fixture_cmd("runs.py", counter, "ignore-term", "exit0"))
    stack.wait_log(job_id, "ready")
    stack.tpuq("preempt", str(job_id))
    job = stack.wait_state(job_id, "succeeded", "failed", timeout=20)
    assert job.state == "succeeded"
    first, second = stack.attempts(job_id)
    assert first.outcome == "preempted" and first.exit_signal == 9
    assert first.ended_at - first.started_at >= 1.0, "killed only after its grace"
    assert second.outcome == "succeeded"
    # the second run was a resumption with nothing to resume from: it started from scratch
    assert counter.read_text().splitlines() == ["1 0 0", "2 1 0"]
    assert job.failures == 0 and job.preemptions == 1


def test_exit_75_requeues_without_counting_a_failure(stack, host, tmp_path):
    stack.start_agent(host)
    counter = tmp_path / "runs.txt"
    job_id = stack.submit(*fixture_cmd("runs.py", counter, "exit75", "exit0"))
    job = stack.wait_state(job_id, "succeeded", "failed")
    assert job.state == "succeeded"
    first, second = stack.attempts(job_id)
    assert first.outcome == "requeued" and first.exit_code == 75
    assert job.failures == 0


def test_failing_job_runs_max_retries_plus_one_times_then_fails(stack, host, tmp_path):
    stack.start_agent(host)
    counter = tmp_path / "runs.txt"
    job_id = stack.submit("--max-retries", "2", *fixture_cmd("runs.py", counter, "exit3"))
    job = stack.wait_state(job_id, "failed", "succeeded", timeout=30)
    assert job.state == "failed" and job.exit_code == 3
    assert job.failures == 3
    assert [a.outcome for a in stack.attempts(job_id)] == ["failed"] * 3
    assert len(counter.read_text().splitlines()) == 3


def test_preemption_does_not_use_up_retries(stack, host, tmp_path):
    stack.start_agent(host)
    counter = tmp_path / "runs.txt"
    job_id = stack.submit("--max-retries", "1",
                          *fixture_cmd("runs.py", counter, "term75", "exit3", "exit0"))
    stack.wait_log(job_id, "ready")
    stack.tpuq("preempt", str(job_id))
    job = stack.wait_state(job_id, "succeeded", "failed", timeout=30)
    assert job.state == "succeeded", [a.reason for a in stack.attempts(job_id)]
    assert [a.outcome for a in stack.attempts(job_id)] == ["preempted", "failed", "succeeded"]
    assert job.failures == 1 and job.preemptions == 1


def test_no_requeue_job_ends_when_preempted_and_never_runs_again(stack, host, tmp_path):
    stack.start_agent(host)
    counter = tmp_path / "runs.txt"
    job_id = stack.submit("--no-requeue", *fixture_cmd("runs.py", counter, "term75"))
    stack.wait_log(job_id, "ready")
    stack.tpuq("preempt", str(job_id))
    job = stack.wait_state(job_id, "failed", "cancelled", "succeeded", "queued", timeout=15)
    assert job.state != "queued", "a --no-requeue job must not be requeued"
    assert job.preemptions == 1 and job.failures == 0
    assert "not requeued" in (job.reason or "")
    [only] = stack.attempts(job_id)
    assert only.outcome == "preempted"
    # another job runs after it on the same host; the preempted one is not among them
    after = stack.submit("--", "/bin/true")
    stack.wait_state(after, "succeeded")
    assert len(stack.attempts(job_id)) == 1 and len(counter.read_text().splitlines()) == 1


# ---- drain --------------------------------------------------------------------------------------

def test_drain_preempts_running_jobs_and_starts_none_until_undrain(stack, host, tmp_path):
    stack.start_agent(host)
    gate = tmp_path / "gate"
    running = stack.submit(*fixture_cmd("until_gate.py", gate))
    stack.wait_log(running, "ready")
    r = stack.tpuq("drain", host.name)
    assert str(running) in r.stdout
    stack.wait_state(running, "queued", timeout=15)
    assert stack.attempts(running)[0].outcome == "preempted"
    waiting = stack.submit(*fixture_cmd("until_gate.py", gate))
    # several scheduler passes and heartbeats later, nothing has started on the drained host
    beat = stack.host(host.name).heartbeat_at
    wait_for(lambda: stack.host(host.name).heartbeat_at > beat + 1.5, 10, "heartbeats")
    assert stack.job(running).state == "queued" and stack.job(waiting).state == "queued"
    assert len(stack.attempts(running)) == 1 and stack.attempts(waiting) == []
    assert stack.host(host.name).draining
    stack.tpuq("undrain", host.name)
    stack.wait_state(running, "running", timeout=15)
    gate.touch()
    jobs = stack.wait_all([running, waiting], "succeeded")
    assert jobs[0].preemptions == 1 and jobs[0].failures == 0


def test_upcoming_maintenance_far_away_lets_jobs_run_until_the_lead_time(stack, host, metadata):
    """A window announced an hour ahead does not preempt now; one inside the lead does."""
    import datetime as dt

    stack.start_agent(host, TPUQ_METADATA_URL=metadata.url, TPUQ_MAINTENANCE_LEAD_S="300")
    job_id = stack.submit("--grace", "2s", "--", "/bin/sleep", "600")
    stack.wait_state(job_id, "running")
    far = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).isoformat()
    metadata.set("instance/upcoming-maintenance", json.dumps(
        {"windowStartTime": far, "maintenanceType": "SCHEDULED", "maintenanceStatus": "PENDING"}))
    wait_for(lambda: "preempting jobs in" in stack.agents[0].log_tail(), 15, "the notice")
    assert stack.job(job_id).state == "running", "an hour away: keep training"
    near = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=60)).isoformat()
    metadata.set("instance/upcoming-maintenance", json.dumps(
        {"windowStartTime": near, "maintenanceType": "SCHEDULED", "maintenanceStatus": "PENDING"}))
    job = stack.wait_state(job_id, "queued", timeout=20)
    assert job.preemptions == 1
    [first] = [a for a in stack.attempts(job_id) if a.number == 1]
    assert "upcoming maintenance SCHEDULED" in first.reason, "the notice is on the attempt"


def test_a_platform_sigterm_on_a_reclaimed_vm_is_a_preemption_whatever_the_exit(
        stack, host, tmp_path, metadata):
    """A spot VM reclaimed (or TPU Autocheckpoint) sends SIGTERM to the training process
    itself, not through tpuq. A job that saves and exits 0 then has work left: it is
    recorded preempted and requeued, not succeeded."""
    stack.start_agent(host, TPUQ_METADATA_URL=metadata.url)
    marker = tmp_path / "saved"
    job_id = stack.submit(*fixture_cmd("trap_term.py", marker))
    first = stack.wait_process(job_id)
    stack.wait_log(job_id, "ready")
    metadata.set("instance/preempted", "TRUE")  # before the agent's next poll sees it
    os.kill(first.pid, signal.SIGTERM)
    wait_for(lambda: stack.attempts(job_id)[0].outcome, 20, "the attempt's end")
    [att] = [a for a in stack.attempts(job_id) if a.number == 1]
    assert att.exit_code == 0 and marker.exists(), "the job saved and exited 0"
    assert att.outcome == "preempted" and "instance preempted" in att.reason
    job = stack.job(job_id)
    assert job.state != "succeeded" and job.preemptions == 1 and job.failures == 0
