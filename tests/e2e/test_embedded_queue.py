"""The core promise on one TPU VM: jobs run one at a time, in order, and stop cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import FIXTURES, fixture_cmd, wait_for


def intervals(path: Path) -> list[tuple[str, float, float]]:
    starts, spans = {}, []
    for line in path.read_text().splitlines():
        kind, job, attempt, t = line.split()
        assert kind != "OVERLAP", f"job {job} ran while another job held the TPU"
        if kind == "start":
            starts[(job, attempt)] = float(t)
        else:
            spans.append((job, starts.pop((job, attempt)), float(t)))
    return sorted(spans, key=lambda s: s[1])


def test_jobs_on_one_exclusive_tpu_run_serially_in_order(stack, host, tmp_path):
    stack.start_agent(host)
    out = tmp_path / "record.txt"
    ids = [stack.submit(*fixture_cmd("record.py", out, 0.3)) for _ in range(4)]
    jobs = stack.wait_all(ids, "succeeded")
    assert all(j.exit_code == 0 for j in jobs)
    spans = intervals(out)
    assert [int(job) for job, _, _ in spans] == ids, "jobs ran out of submission order"
    for (_, _, end), (_, start, _) in zip(spans, spans[1:]):
        assert start >= end, "two jobs overlapped on one exclusive TPU"


def test_submitted_script_runs_with_submitters_python_cwd_and_environment(stack, host, tmp_path):
    stack.start_agent(host)
    workdir = tmp_path / "project"
    workdir.mkdir()
    script = workdir / "show_env.py"
    script.write_text((FIXTURES / "show_env.py").read_text())
    job_id = stack.submit("show_env.py", "--lr", "3e-4", cwd=workdir)
    stack.wait_state(job_id, "succeeded")
    seen = json.loads(stack.log_text(job_id))
    assert seen["cwd"] == str(workdir)
    assert seen["args"] == ["--lr", "3e-4"]
    assert os.path.realpath(seen["python"]) == os.path.realpath(sys.executable)
    env = seen["env"]
    assert env["TPUQ_JOB_ID"] == str(job_id) and env["TPUQ_ATTEMPT"] == "1"
    assert env["TPUQ_CHECKPOINT_DIR"] == str(stack.checkpoint_dir(job_id))
    assert env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]
    assert "TPU_VISIBLE_CHIPS" not in env, "a whole-host job must not be partitioned"
    assert seen["sigmask"] == [] and seen["sid_is_pid"], "job must lead its own session"


def test_cancel_running_job_delivers_sigterm_within_grace(stack, host, tmp_path):
    stack.start_agent(host)
    marker = tmp_path / "checkpointed"
    job_id = stack.submit("--grace", "20s", *fixture_cmd("trap_term.py", marker))
    stack.wait_log(job_id, "ready")
    stack.tpuq("cancel", str(job_id))
    job = stack.wait_state(job_id, "cancelled", timeout=15)
    assert marker.read_text().startswith("got signal 15")
    assert job.exit_code == 0 and job.exit_signal is None, "it exited by itself within the grace"
    events = json.loads(stack.tpuq("show", str(job_id), "--json").stdout)["events"]
    assert [e["to"] for e in events] == ["queued", "assigned", "running", "preempting", "cancelled"]


def test_job_ignoring_sigterm_is_killed_after_grace(stack, host):
    stack.start_agent(host)
    job_id = stack.submit("--grace", "1s", *fixture_cmd("ignore_term.py"))
    stack.wait_log(job_id, "ready")
    stack.tpuq("cancel", str(job_id))
    job = stack.wait_state(job_id, "cancelled", timeout=15)
    assert job.exit_signal == 9
    [attempt] = stack.attempts(job_id)
    assert "killed by signal 9 (SIGKILL)" in attempt.reason
    assert attempt.ended_at - attempt.started_at >= 1.0


def test_cancel_queued_job_is_immediate(stack, host, tmp_path):
    stack.start_agent(host)
    gate = tmp_path / "gate"
    blocker = stack.submit(*fixture_cmd("wait_file.py", gate))
    stack.wait_log(blocker, "waiting")
    queued = stack.submit("--", "/bin/true")
    r = stack.tpuq("cancel", str(queued))
    assert "cancelled" in r.stdout
    assert stack.job(queued).state == "cancelled"
    gate.touch()
    stack.wait_state(blocker, "succeeded")
    assert stack.attempts(queued) == [], "a cancelled queued job never starts"


def test_job_killed_by_signal_is_reported_as_such(stack, host):
    stack.start_agent(host)
    job_id = stack.submit("--", "/bin/sh", "-c", "kill -SEGV $$")
    job = stack.wait_state(job_id, "failed")
    assert job.exit_signal == 11 and job.exit_code is None
    assert job.reason == "killed by signal 11 (SIGSEGV)"
    shown = stack.tpuq("show", str(job_id)).stdout
    assert "killed by signal 11 (SIGSEGV)" in shown


def test_exit_code_failure_and_resubmit_failed(stack, host):
    stack.start_agent(host)
    bad = stack.submit("--", "/bin/sh", "-c", "echo oops; exit 3")
    good = stack.submit("--", "/bin/true")
    assert stack.wait_state(bad, "failed").exit_code == 3
    stack.wait_state(good, "succeeded")
    r = stack.tpuq("resubmit", "--failed", "--since", "1h", "--json")
    [res] = json.loads(r.stdout)
    new = res["id"]
    assert new != bad and stack.job(new).resubmit_of == bad
    assert stack.wait_state(new, "failed").exit_code == 3
    again = stack.tpuq("resubmit", "--failed", "--since", "1h", "--dry-run").stdout
    assert f"{new}" in again and f" {bad}" not in again, "an original already resubmitted is skipped"


def test_logs_follow_prints_output_until_job_ends(stack, host):
    stack.start_agent(host)
    job_id = stack.submit("--", "/bin/sh", "-c", "echo first; sleep 0.5; echo second")
    r = stack.tpuq("logs", job_id.__str__(), "-f")
    assert r.stdout.splitlines() == ["first", "second"]
    assert stack.job(job_id).state == "succeeded"


def test_status_json_lists_jobs_with_contract_keys(stack, host):
    stack.start_agent(host)
    job_id = stack.submit("--", "/bin/sh", "-c", "exit 0")
    stack.wait_state(job_id, "succeeded")
    [job] = json.loads(stack.tpuq("status", "--json").stdout)
    for key in ("id", "state", "attempts", "host", "exit_code", "command"):
        assert key in job
    assert (job["id"], job["state"], job["attempts"], job["host"], job["exit_code"]) == \
        (job_id, "succeeded", 1, "tpu-a", 0)
    human = stack.tpuq("status").stdout
    assert "tpu-a" in human and "0/4" in human


def test_agent_ctrl_c_preempts_and_requeues_running_job(stack, host, tmp_path):
    agent = stack.start_agent(host)
    marker = tmp_path / "saved"
    job_id = stack.submit("--grace", "10s", *fixture_cmd("trap_term.py", marker))
    stack.wait_log(job_id, "ready")
    agent.proc.send_signal(2)  # what Ctrl-C does
    assert agent.proc.wait(20) == 0
    job = stack.job(job_id)
    assert job.state == "queued" and job.preemptions == 1 and job.failures == 0
    assert marker.exists(), "the job got its stop signal and saved"
    assert stack.host("tpu-a").stopped_at is not None


def test_second_ctrl_c_kills_jobs_at_once(stack, host):
    agent = stack.start_agent(host)
    job_id = stack.submit("--grace", "60s", *fixture_cmd("ignore_term.py"))
    stack.wait_log(job_id, "ready")
    agent.proc.send_signal(2)
    wait_for(lambda: stack.job(job_id).state == "preempting", 10, "the stop to be recorded")
    agent.proc.send_signal(2)
    assert agent.proc.wait(15) == 0, "a second Ctrl-C must not wait out the 60 s grace"
    assert stack.job(job_id).state == "queued"


def test_cli_wakes_agent_so_polling_is_only_a_fallback(stack, host):
    # a 60 s poll interval: if the job starts, the socket doorbell rang
    stack.start_agent(host, TPUQ_POLL_S="60", TPUQ_HEARTBEAT_S="60", TPUQ_LEASE_S="600",
                      TPUQ_HOST_STALE_S="900")
    job_id = stack.submit("--", "/bin/true")
    stack.wait_state(job_id, "succeeded", timeout=10)


@pytest.mark.embedded_only
def test_submit_without_agent_queues_and_agent_picks_it_up(stack, host):
    r = stack.tpuq("submit", "--", "/bin/true")
    assert "no agent is running" in r.stderr
    job_id = int(r.stdout.split()[-1])
    assert stack.job(job_id).state == "queued"
    stack.start_agent(host)
    stack.wait_state(job_id, "succeeded")


@pytest.mark.embedded_only
def test_the_agent_copies_the_databases_log_on_its_own(stack, host):
    """Its commits leave the write-ahead log to its checkpoint ticker (no job start waits
    for the copy), which copies all of it: far fewer frames than SQLite's automatic
    checkpoint waits for (1,000 pages) are copied all the same."""
    stack.start_agent(host)
    jobs = [stack.submit("--", "/bin/true") for _ in range(3)]
    for job in jobs:
        stack.wait_state(job, "succeeded")
    shm = stack.home / "tpuq.db-shm"
    wait_for(lambda: _log_frames(shm)[0] > 0, 10, "frames in the log")
    wait_for(lambda: (lambda frames, copied: copied == frames > 0)(*_log_frames(shm)), 10,
             "every frame of the log copied", on_timeout=lambda: f"{_log_frames(shm)}")


def _log_frames(shm: Path) -> tuple[int, int]:
    """(frames in the write-ahead log, frames of it copied into the database), read from
    its index without opening the database: `mxFrame` at byte 16 and `nBackfill` at byte
    96 of the -shm file, in the host's byte order (https://www.sqlite.org/walformat.html,
    "The WAL-Index Header" and "The WAL-Index Checkpoint Info")."""
    import struct

    head = shm.read_bytes()[:100]
    return struct.unpack_from("=I", head, 16)[0], struct.unpack_from("=I", head, 96)[0]


def test_hold_and_release(stack, host):
    stack.start_agent(host)
    job_id = stack.submit("--hold", "--", "/bin/true")
    assert stack.job(job_id).state == "held"
    other = stack.submit("--", "/bin/true")
    stack.wait_state(other, "succeeded")
    assert stack.job(job_id).state == "held", "a held job never starts"
    stack.tpuq("release", str(job_id))
    stack.wait_state(job_id, "succeeded")


def test_second_agent_for_same_host_refuses(stack, host):
    stack.start_agent(host)
    r = subprocess.run([sys.executable, "-c", "from tpuq.cli.main import main; main()", "agent"],
                       env=stack.env(host), capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "already" in r.stderr and "Traceback" not in r.stderr
