"""The agent owns the TPU: foreign holders block it, orphans and stale locks are cleaned,
and a crashed agent loses nothing."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys

from sqlalchemy import update

from tests.e2e.test_embedded_queue import intervals
from tests.harness import FIXTURES, fixture_cmd, wait_for
from tpuq.agent.tpu.holders import is_same_process
from tpuq.state.models import Attempt


def test_foreign_holder_blocks_host_is_reported_and_job_runs_after_it_exits(stack, host):
    holder = subprocess.Popen([sys.executable, str(FIXTURES / "hold_device.py"),
                               str(host.dev / "accel2")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        stack.start_agent(host)
        job_id = stack.submit("--", "/bin/true")
        busy = wait_for(lambda: stack.host("tpu-a").busy_reason, 15, "host marked busy")
        assert f"pid {holder.pid}" in busy and "hold_device.py" in busy
        status = stack.tpuq("status").stdout
        assert f"pid {holder.pid}" in status and "hold_device.py" in status
        assert stack.job(job_id).state == "queued", "no job starts beside a foreign process"
        assert all(a.pid is None for a in stack.attempts(job_id))
    finally:
        holder.stdin.close()
        holder.wait(10)
    stack.wait_state(job_id, "succeeded", timeout=20)
    assert stack.host("tpu-a").busy_reason is None
    assert stack.job(job_id).failures == 0, "a busy host is not the job's failure"


def test_foreign_holder_that_comes_between_two_jobs_is_caught(stack, host):
    """The scan before a start is skipped only while inotify shows every open of the
    devices closed again: a process that opens one after the last scan is still found."""
    stack.start_agent(host)
    first = stack.submit("--", "/bin/true")
    stack.wait_state(first, "succeeded")  # the chips were scanned and found free
    holder = subprocess.Popen([sys.executable, str(FIXTURES / "hold_device.py"),
                               str(host.dev / "accel1")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        second = stack.submit("--", "/bin/true")
        busy = wait_for(lambda: stack.host("tpu-a").busy_reason, 15, "host marked busy")
        assert f"pid {holder.pid}" in busy
        assert stack.job(second).state == "queued"
    finally:
        holder.stdin.close()
        holder.wait(10)
    stack.wait_state(second, "succeeded", timeout=20)


def test_stale_libtpu_lock_without_holder_is_removed_before_next_job(stack, host):
    host.lockfile.write_text("")  # left behind by a crashed libtpu
    stack.start_agent(host)
    wait_for(lambda: not host.lockfile.exists(), 10, "stale lock removed at agent start")
    host.lockfile.write_text("")  # a crash between jobs
    job_id = stack.submit("--", "/bin/sh", "-c", f"test ! -e {host.lockfile}")
    assert stack.wait_state(job_id, "succeeded", "failed").state == "succeeded", \
        "the job saw the stale lock file"


def test_lock_file_held_by_live_process_is_never_removed(stack, host):
    fd = os.open(host.lockfile, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what libtpu does
    try:
        inode = os.stat(host.lockfile).st_ino
        stack.start_agent(host)
        job_id = stack.submit("--", "/bin/true")
        stack.wait_state(job_id, "succeeded")
        assert os.stat(host.lockfile).st_ino == inode
    finally:
        os.close(fd)


def test_agent_sigkill_and_restart_costs_the_running_job_nothing(stack, host, tmp_path):
    """The job's parent is its keeper: the agent dies, the job runs on, and the agent
    that comes back adopts it. One attempt, one run, and the queue behind it after.
    The lease outlasts a restart on a loaded machine: a keeper whose lease runs out
    unrenewed stops its job, as it must (test_fencing.py)."""
    slow_restart = {"TPUQ_LEASE_S": "30", "TPUQ_HOST_STALE_S": "30"}
    agent = stack.start_agent(host, **slow_restart)
    out, gate = tmp_path / "record.txt", tmp_path / "gate"
    first = stack.submit(*fixture_cmd("record.py", out, gate))
    rest = [stack.submit(*fixture_cmd("record.py", out, 0.2)) for _ in range(3)]
    running = stack.wait_process(first)
    agent.kill()
    assert is_same_process(running.pid, running.proc_start), "the job outlives its agent"
    stack.start_agent(host, **slow_restart)
    wait_for(lambda: "adopted from its keeper" in stack.agents[0].log_since_start(), 15,
             "the new agent to adopt the running job",
             on_timeout=lambda: stack.agents[0].log_since_start()[-3000:])
    assert is_same_process(running.pid, running.proc_start), "adopted, not killed"
    gate.touch()
    job = stack.wait_state(first, "succeeded")
    assert job.attempt == 1 and job.preemptions == 0 and job.failures == 0
    stack.wait_all(rest, "succeeded")
    spans = intervals(out)
    assert [int(j) for j, _, _ in spans] == [first, *rest]
    for (_, _, end), (_, start, _) in zip(spans, spans[1:]):
        assert start >= end


def test_an_orphan_whose_pid_never_reached_the_database_is_killed_at_restart(stack, host):
    """The agent can die between spawning a job and recording its pid. A job that holds
    no TPU device (CPU work, or a fake device here) is then invisible to the device
    scan: the restarted agent must still find and kill it by its tpuq environment
    before the job runs again, or two copies run at once."""
    agent = stack.start_agent(host, TPUQ_LEASE_S="600")
    job_id = stack.submit("--", "/bin/sleep", "600")
    first = stack.wait_process(job_id)
    agent.kill()
    stack.kill_keepers()  # its keeper too: nothing is left to adopt the job
    with stack.db.write() as s:  # as if the agent died before it recorded the pid
        s.execute(update(Attempt).where(Attempt.id == first.id)
                  .values(pid=None, proc_start=None))
    stack.start_agent(host, TPUQ_LEASE_S="600")
    wait_for(lambda: not is_same_process(first.pid, first.proc_start), 15,
             "the unrecorded orphan to be killed")
    job = stack.wait_state(job_id, "running", timeout=15)
    assert job.attempt == 2 and stack.attempts(job_id)[0].outcome == "preempted"
    stack.tpuq("cancel", str(job_id))
    stack.wait_state(job_id, "cancelled")


def test_reboot_requeues_active_jobs_at_once(stack, host):
    agent = stack.start_agent(host, TPUQ_LEASE_S="600")  # lease expiry must not be what saves it
    job_id = stack.submit("--", "/bin/sleep", "600")
    pid = stack.wait_process(job_id).pid
    agent.kill()
    stack.kill_keepers()  # a reboot kills everything
    os.killpg(pid, signal.SIGKILL)
    host.reboot()
    host.lockfile.write_text("")
    stack.start_agent(host, TPUQ_LEASE_S="600")
    job = stack.wait_state(job_id, "running", timeout=15)
    first, second = stack.attempts(job_id)
    assert first.outcome == "preempted" and first.reason == "host rebooted"
    assert second.boot_id != first.boot_id
    assert job.failures == 0 and job.preemptions == 1
    stack.tpuq("cancel", str(job_id))
    stack.wait_state(job_id, "cancelled")


def test_tpu_busy_output_is_a_host_problem_not_a_failure(stack, host, tmp_path):
    stack.start_agent(host)
    job_id = stack.submit("--max-retries", "0", *fixture_cmd("busy_once.py", tmp_path / "m"))
    job = stack.wait_state(job_id, "succeeded", "failed", timeout=30)
    assert job.state == "succeeded" and job.failures == 0
    first, second = stack.attempts(job_id)
    assert first.outcome == "host_error" and "Device or resource busy" in first.reason
    assert second.outcome == "succeeded"
